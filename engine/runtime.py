"""The functions generated code calls, in two flavours sharing one code path.

`scalar_namespace()` binds them to `math` and plain Python, for one config (microseconds, no
NumPy import). `numpy_namespace()` binds them to NumPy ufuncs, for arrays of many configs. The
generated code is the same text in both cases; only these bindings differ. Kept free of sympy,
networkx and numpy imports at module level: this is on the start-up path of a cached `eval`.

Two kinds of names: the language's operators (`_where`, `_and`, `_div`, ...), defined here, and
the formula functions (`_fn_NAME`, `runtime_name`), bound from their `Function` declarations:
the core's (core_functions.py, its `functions` hook) and the plugins' alike (`helpers`).
"""

from __future__ import annotations

import math
from functools import reduce
from typing import Any


def _where(cond: Any, a: Any, b: Any) -> Any:
    return a if cond else b


def _many(cond: Any) -> bool:
    """Whether a condition holds many values (one per config): never, for one config, so
    `where` computes only the branch taken."""
    return False


def _and(*a: Any) -> bool:
    return all(a)


def _or(*a: Any) -> bool:
    return any(a)


def _not(a: Any) -> bool:
    return not a


def _div(a: Any, b: Any) -> Any:
    """Division that, like NumPy, gives inf or nan instead of raising: generated code computes
    both branches of every condition, and the branch not taken may divide by zero."""
    try:
        return a / b
    except ZeroDivisionError:
        return math.nan if a == 0 else math.copysign(math.inf, a)


def runtime_name(name: str) -> str:
    """The name generated code calls formula function `name` by."""
    return f"_fn_{name}"


def helpers(functions: Any) -> dict[str, tuple[Any, Any]]:
    """Runtime name -> (scalar, numpy or None) for `hookspecs.Function` declarations."""
    return {runtime_name(fn.name): (fn.python, fn.numpy) for fn in functions}


_CORE_HELPERS: dict[str, tuple[Any, Any]] = {}


def _core_helpers() -> dict[str, tuple[Any, Any]]:
    """The core's functions, as its `functions` hook declares them (core_functions.py)."""
    if not _CORE_HELPERS:
        from .core_functions import functions

        _CORE_HELPERS.update(helpers(functions()))
    return _CORE_HELPERS


# Plugin functions registered through expr.register_function: runtime name -> (scalar, numpy).
# A CompiledModel also binds its plugin set's functions explicitly (the `extra` argument).
_PLUGIN_HELPERS: dict[str, tuple[Any, Any]] = {}


def register_helper(name: str, python_impl: Any, numpy_impl: Any = None) -> None:
    """Make `name` callable from generated code (numpy_impl defaults to numpy.vectorize)."""
    _PLUGIN_HELPERS[name] = (python_impl, numpy_impl)


def vectorized(python_impl: Any) -> Any:
    """An array version of a scalar function, for plugins that give no NumPy form."""
    import numpy as np

    return np.vectorize(python_impl, otypes=[float])


def scalar_namespace(extra: dict[str, Any] | None = None,
                     fast: bool = False) -> dict[str, Any]:
    """Bindings for one config. `fast`: the two operators generated code calls most often
    (hundreds of times per evaluation) bound to C callables, so that no Python frame is pushed
    for them -- `_div` to plain division, which raises on a zero divisor instead of giving inf
    (the caller then runs the safe flavour, model.py), and `_many` to `callable`, False for any
    number or truth value as `_many` is. A Python call from the generated function, whose frame
    is thousands of slots, can land at the end of CPython's data-stack chunk and then maps and
    unmaps a chunk per call: measured 20x slower at one call depth (842,000 mmap/munmap pairs
    for 10,887 evaluations)."""
    import operator

    ns: dict[str, Any] = {
        "_where": _where, "_and": _and, "_or": _or, "_not": _not,
        "_div": operator.truediv if fast else _div,
        "_asarray": lambda x: x, "_many": callable if fast else _many,
    }
    for table in (_core_helpers(), _PLUGIN_HELPERS):
        ns.update({name: impl for name, (impl, _) in table.items()})
    if extra:
        ns.update(extra)
    return ns


_TUNED: list[bool] = []
MMAP_THRESHOLD = 32 << 20  # glibc's largest; a block's arrays are far below it
TRIM_THRESHOLD = 256 << 20  # free heap kept for the next block rather than handed back


def tune_allocator() -> bool:
    """Stop glibc's malloc from returning a block's temporaries to the kernel after every
    block and faulting them back in for the next one.

    A block of 16,384 float64 configs makes arrays of exactly 128 KiB, glibc's default mmap
    threshold, and a few hundred temporaries per block: freed, they shrink the heap (trim) or
    are unmapped, and the next block takes page faults for the same memory again -- measured:
    1.08 M page faults per 3 s and a quarter of the speed. Fixing the thresholds (which also
    switches off glibc's dynamic adjustment) keeps the memory in the process. Once per process,
    on glibc only; DLFORMULA_TUNE_MALLOC=0 leaves the allocator alone. Returns whether it
    tuned."""
    if _TUNED:
        return _TUNED[0]
    import os

    done = False
    if os.environ.get("DLFORMULA_TUNE_MALLOC", "1") != "0":
        try:
            if (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"):
                import ctypes

                libc = ctypes.CDLL(None)
                m_trim_threshold, m_mmap_threshold = -1, -3  # from glibc's malloc.h
                done = bool(libc.mallopt(m_mmap_threshold, MMAP_THRESHOLD)
                            and libc.mallopt(m_trim_threshold, TRIM_THRESHOLD))
        except (OSError, ValueError, AttributeError):
            done = False
    _TUNED.append(done)
    return done


def numpy_namespace(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    import numpy as np

    tune_allocator()

    def nand(*a: Any) -> Any:
        return reduce(np.logical_and, a)

    def nor(*a: Any) -> Any:
        return reduce(np.logical_or, a)

    def many(cond: Any) -> bool:
        """Whether a condition is an array (NumPy's `where` of both branches); a scalar or a
        0-d array (a choice not swept) picks its branch before the other is computed."""
        return bool(getattr(cond, "shape", ()))

    # Division and modulo by zero give inf or nan without a warning: the generated code
    # computes both branches of a condition over arrays. CompiledModel runs every vectorized
    # function under np.errstate(divide="ignore", invalid="ignore") once per call (setting it
    # per operation cost a search a fifth of its time).
    ns: dict[str, Any] = {
        "_where": np.where, "_and": nand, "_or": nor, "_not": np.logical_not,
        "_div": np.true_divide, "_asarray": np.asarray, "_many": many,
    }
    for table in (_core_helpers(), _PLUGIN_HELPERS):
        ns.update({name: impl if impl is not None else vectorized(py)
                   for name, (py, impl) in table.items()})
    if extra:
        ns.update(extra)
    return ns
