"""`--where` filters: a condition over a config's names, compiled like a formula.

The text goes through the formula language itself: `expr.parse` (the whitelist: data, never
code), `expr.Builder` (names, choice labels, functions and dimensions checked exactly as in a
formula file) and the code generator's printer, bound to the NumPy runtime the vectorized model
uses. So every function a formula may call -- the core's and those plugins register -- is
accepted here, and `memory_per_gpu < 70 * GiB` is unit-checked: unit names (GiB, ms, h, ...)
stand for their size in SI base units with their dimension.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import UsageError, did_you_mean


def _flat(value: Any, shape: int | tuple[int, ...]) -> np.ndarray:
    """A value broadcast to a grid of `shape`, in flat (C) order."""
    return np.broadcast_to(value, (shape,) if isinstance(shape, int) else shape).reshape(-1)


class Where:
    """A filter over a config's names, e.g. `memory_per_gpu < 0.9 * hbm_capacity`.

    `names` are the model names it reads; calling it with their values (arrays broadcastable
    to `shape`) gives the flat mask of the configs it keeps.
    """

    def __init__(self, text: str, model: Any) -> None:
        import sympy

        from .codegen import CodegenError, _Body, _Printer
        from .expr import Builder, ExprError, NameInfo, parse, runtime_names
        from .runtime import numpy_namespace
        from .units import UNITS, parse_unit

        self.text, self.model = text, model
        try:
            parsed = parse(text)
        except ExprError as exc:
            raise UsageError(f"--where '{text}': {exc}") from None
        defs = {**model.inputs, **model.constants, **model.quantities}
        env: dict[str, NameInfo] = {}
        self.names: set[str] = set()
        self.units: dict[str, float] = {}
        for name in sorted(parsed.names):
            d = defs.get(name)
            if d is not None:
                choices = getattr(d, "choices", None)
                env[name] = NameInfo(parse_unit(d.unit).dim, dict(choices) if choices else None)
                self.names.add(name)
                continue
            unit = UNITS.get(name) if name != "1" else None
            if unit is None:
                raise UsageError(f"--where '{text}': unknown name '{name}'"
                                 f"{did_you_mean(name, defs)}; `dlformula list` shows them")
            env[name] = NameInfo(unit.dim)
            self.units[name] = unit.scale
        try:
            condition = Builder(env, sympy.Symbol).build_condition(parsed)
            printer = _Printer(runtime_names(), shared=False)
            root = printer.p(condition)
        except (ExprError, CodegenError) as exc:
            raise UsageError(f"--where '{text}': {exc}") from None
        source = _Body(printer.code, [root], shared=False, lazy=False).text(root, None)
        self.code = compile(source, "<--where>", "eval")
        self.namespace = numpy_namespace()

    def __call__(self, values: Mapping[str, Any], shape: int | tuple[int, ...]) -> np.ndarray:
        """Flat mask over a grid of `shape` (or n configs)."""
        scope = {**self.units, **{n: values[n] for n in self.names}}
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            kept = eval(self.code, self.namespace, scope)  # noqa: S307 (printed from sympy)
        return _flat(np.asarray(kept, dtype=bool), shape)
