"""Hook specifications: everything a plugin can contribute, in one place.

A plugin is a module (or any object) whose functions are marked with `@hookimpl` and named after
the hooks below. The core formulas and the built-in MoE plugin register through these same
hooks; `dlformula plugins` lists what each loaded plugin contributes. docs/plugins.md has a
complete example.

    from dlformula.hookspecs import hookimpl

    @hookimpl
    def formula_folders():
        return [importlib.resources.files(__name__) / "formulas"]

Every hook takes no arguments except `register_commands(cli)`, and a plugin implements only the
hooks it needs. Data hooks return a list (or any iterable); a folder is a `pathlib.Path`, a
string path or an `importlib.resources` Traversable. A misspelled hook name is an error that
names the plugin and suggests the right one (pluggy's `check_pending`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import pluggy

hookspec = pluggy.HookspecMarker("dlformula")
hookimpl = pluggy.HookimplMarker("dlformula")


class Function(NamedTuple):
    """A function formulas may call, in each form the engine needs.

    - `python`: the implementation for one config (plain numbers; `math` is fine);
    - `numpy`: the same on NumPy arrays, for sweeps (default: `numpy.vectorize(python)`);
    - `excel`: the spreadsheet function the live workbook writes (`"CEILING"`), or a form with
      `{}` for each argument (`"CEILING({},1)"`); leave it empty and `dlformula export` refuses
      formulas that use the function;
    - `sympy`: builds the symbolic form shown by `explain --latex` (default: an opaque sympy
      function called `name`, which generated code evaluates with `python`/`numpy`);
    - `args`: how many arguments, an int or `(min, max)` with `max` None for any number;
    - `dims`: how units flow: "dimensionless" (pure numbers in and out), "same" (all arguments
      share a unit, which the result has), "first" (the result has the first argument's unit,
      the others are pure numbers) or "sqrt" (half the argument's unit's powers).

    The built-in functions (`Max`, `ceiling`, `log`, ...) are declared the same way, by the
    core's own `functions` hook (`dlformula.core_functions`).
    """

    name: str
    python: Callable[..., Any]
    numpy: Callable[..., Any] | None = None
    excel: str = ""
    args: int | tuple[int, int | None] = 1
    dims: str = "dimensionless"
    doc: str = ""
    sympy: Callable[..., Any] | None = None


@hookspec
def formula_folders() -> Any:
    """Folders of formula files (`*.yaml`, same syntax as formulas/) this plugin adds.

    A plugin file may define new inputs and quantities, and replace an existing definition with
    `override: true`; defining a name twice without it is an error naming both files."""


@hookspec
def hardware_folders() -> Any:
    """Folders of hardware node types (one YAML file per node, see docs/hardware.md)."""


@hookspec
def preset_folders() -> Any:
    """Folders of model presets (one YAML file per model, see presets/README.md)."""


@hookspec
def config_keys() -> Any:
    """Config keys that become inputs, without writing a formula file.

    Return a mapping of dotted config key to the input's fields, as in a formula file's
    `inputs:` (unit, default, domain or choices, doc, source), plus an optional `name` (default:
    the key's last part):

        {"example.allocation_granularity": {"unit": "byte", "default": 2097152,
                                             "domain": "number > 0", "doc": "..."}}
    """


@hookspec
def functions() -> Any:
    """Functions formulas may call: a list of `dlformula.hookspecs.Function` (the core's
    built-ins come through this hook too; a plugin may not reuse their names)."""


@hookspec
def register_commands(cli: Any) -> None:
    """Add click commands to the `dlformula` command group (`cli.command()` or
    `cli.add_command(...)`)."""


HOOK_NAMES = ("formula_folders", "hardware_folders", "preset_folders", "config_keys",
              "functions", "register_commands")
