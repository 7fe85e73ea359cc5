"""A plugin whose hook takes an argument the hook does not pass."""
from dlformula.hookspecs import hookimpl


@hookimpl
def formula_folders(engine):
    return []
