"""A plugin with a misspelled hook name."""
from pathlib import Path

from dlformula.hookspecs import hookimpl


@hookimpl
def formula_foldrs():
    return [Path(__file__).parent / "formulas"]
