"""The functions generated code calls, in two flavours sharing one code path.

`scalar_namespace()` binds them to `math` and plain Python, for one config (microseconds, no
NumPy import). `numpy_namespace()` binds them to NumPy ufuncs, for arrays of many configs. The
generated code is the same text in both cases; only these bindings differ. Kept free of sympy,
networkx and numpy imports at module level: this is on the start-up path of a cached `eval`.
"""

from __future__ import annotations

import math
from functools import reduce
from typing import Any


def _where(cond: Any, a: Any, b: Any) -> Any:
    return a if cond else b


def _ceil(x: Any) -> Any:
    return math.ceil(x)


def _floor(x: Any) -> Any:
    return math.floor(x)


def _log(x: Any) -> float:
    return math.log(x)


def _exp(x: Any) -> float:
    return math.exp(x)


def _and(*a: Any) -> bool:
    return all(a)


def _or(*a: Any) -> bool:
    return any(a)


def _not(a: Any) -> bool:
    return not a


def _mod(a: Any, b: Any) -> Any:
    return a % b


def scalar_namespace(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    ns: dict[str, Any] = {
        "_where": _where, "_max": max, "_min": min, "_ceil": _ceil, "_floor": _floor,
        "_abs": abs, "_mod": _mod, "_log": _log, "_exp": _exp, "_and": _and, "_or": _or,
        "_not": _not, "_asarray": lambda x: x,
    }
    if extra:
        ns.update(extra)
    return ns


def numpy_namespace(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    import numpy as np

    def nmax(*a: Any) -> Any:
        return reduce(np.maximum, a)

    def nmin(*a: Any) -> Any:
        return reduce(np.minimum, a)

    def nand(*a: Any) -> Any:
        return reduce(np.logical_and, a)

    def nor(*a: Any) -> Any:
        return reduce(np.logical_or, a)

    ns: dict[str, Any] = {
        "_where": np.where, "_max": nmax, "_min": nmin, "_ceil": np.ceil, "_floor": np.floor,
        "_abs": np.abs, "_mod": np.mod, "_log": np.log, "_exp": np.exp, "_and": nand,
        "_or": nor, "_not": np.logical_not, "_asarray": np.asarray,
    }
    if extra:
        ns.update(extra)
    return ns
