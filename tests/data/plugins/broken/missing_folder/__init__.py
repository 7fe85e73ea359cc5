"""A plugin that returns a data folder it does not have."""
from pathlib import Path

from dlformula.hookspecs import hookimpl


@hookimpl
def hardware_folders():
    return [Path(__file__).parent / "hardware"]
