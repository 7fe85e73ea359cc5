"""The formula language's built-in functions, declared by the core through the `functions` hook
a plugin implements (datasette's habit: its own SQL functions are a plugin module of its own).

Each is a `hookspecs.Function`, the type a plugin returns: the implementation for one config
(`python`), for arrays of configs (`numpy`), the spreadsheet form (`excel`: a function name, or
a form with `{}` for the arguments), arity, how units flow and the sympy form. The plugin
manager registers this module as part of the core plugin, so `dlformula plugins` lists these
under `dlformula`; the formula language's table (`expr.functions()`) and the runtime's
namespaces (`runtime.py`) are built from the same declarations, by the same rules as a
plugin's. A name declared here cannot be taken by a plugin.

Import-light: on a warm `eval`'s path (pluggy and math only). sympy is imported when a formula
is first built, NumPy when an array form is first called.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import reduce
from typing import Any

from .hookspecs import Function, hookimpl


def _sympy(name: str, **options: Any) -> Callable[..., Any]:
    """Build with sympy's `name` (sympy is imported on the first build, not with this table)."""

    def build(*args: Any) -> Any:
        import sympy

        if name in ("Max", "Min") and len(args) == 1:
            return args[0]
        return getattr(sympy, name)(*args, **options)

    return build


def _log2(x: Any) -> Any:
    import sympy

    return sympy.log(x) / sympy.log(2)


def _mod(a: Any, b: Any) -> Any:
    return a % b if b else math.nan


# The array forms: NumPy's, imported on the first call (a warm eval of one config never needs it).
def _np_max(*a: Any) -> Any:
    import numpy as np

    return reduce(np.maximum, a)


def _np_min(*a: Any) -> Any:
    import numpy as np

    return reduce(np.minimum, a)


def _numpy(name: str) -> Callable[..., Any]:
    """NumPy's ufunc `name`, looked up on the first call."""

    def call(*args: Any) -> Any:
        import numpy as np

        return getattr(np, name)(*args)

    call.__name__ = f"_np_{name}"
    return call


# evaluate=False: sympy's Max/Min simplification (pairwise comparisons of symbolic arguments)
# took 0.25 s of a 0.9 s model build and changes no value. `ceil` is `ceiling` by another name
# (it builds sympy's ceiling, so generated code and the workbook treat it as ceiling); log2 and
# sqrt build sympy's log and power, so code and workbook never call them by their own names.
FUNCTIONS = (
    Function("Max", max, _np_max, "MAX", (1, None), "same", "largest argument",
             _sympy("Max", evaluate=False)),
    Function("Min", min, _np_min, "MIN", (1, None), "same", "smallest argument",
             _sympy("Min", evaluate=False)),
    Function("ceiling", math.ceil, _numpy("ceil"), "CEILING({},1)", 1, "same", "round up",
             _sympy("ceiling")),
    Function("floor", math.floor, _numpy("floor"), "INT({})", 1, "same", "round down",
             _sympy("floor")),
    Function("Abs", abs, _numpy("abs"), "ABS", 1, "same", "absolute value", _sympy("Abs")),
    # np.mod gives nan where b is 0, silently: arrays run under CompiledModel's errstate.
    Function("Mod", _mod, _numpy("mod"), "MOD", 2, "same", "remainder of a / b", _sympy("Mod")),
    Function("log", math.log, _numpy("log"), "LN", 1, "dimensionless", "natural logarithm",
             _sympy("log")),
    Function("log2", math.log2, _numpy("log2"), "LN", 1, "dimensionless", "base-2 logarithm",
             _log2),
    Function("exp", math.exp, _numpy("exp"), "EXP", 1, "dimensionless", "e to the power x",
             _sympy("exp")),
    Function("sqrt", math.sqrt, _numpy("sqrt"), "SQRT", 1, "sqrt", "square root", _sympy("sqrt")),
    Function("ceil", math.ceil, _numpy("ceil"), "CEILING({},1)", 1, "same", "round up (ceiling)",
             _sympy("ceiling")),
)


@hookimpl
def functions() -> Any:
    return list(FUNCTIONS)
