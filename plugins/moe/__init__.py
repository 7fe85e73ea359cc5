"""Built-in plugin: mixture-of-experts models with expert parallelism (EP/ETP).

It uses the same hooks as a third-party plugin: its only hook returns the folder of formula
files beside this module. Those files declare the `moe.*` and `parallelism.ep/etp` inputs, the
MoE quantities (moe.yaml) and a few documented overrides of core quantities, each in a file
named after the core file it overrides so it stays in the same group (model.yaml, memory.yaml,
...). With `moe.experts` 0 or 1 (the default) every override equals the core definition, so a
dense model's numbers do not change. docs/plugins.md describes the model and its limits.
"""

from __future__ import annotations

from typing import Any

from dlformula.diskpath import package_folder
from dlformula.hookspecs import hookimpl


@hookimpl
def formula_folders() -> list[Any]:
    # (A third-party plugin writes `importlib.resources.files(__name__) / "formulas"`; the
    # built-in one avoids importing importlib.resources on every start, see diskpath.py.)
    return [package_folder(__name__) / "formulas"]
