"""`--where` filters: an expression over a config's names, walked over NumPy arrays.

The text goes through the formula language's whitelist (`expr.parse`): it is data, never code.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .errors import UsageError, did_you_mean


def _flat(value: Any, shape: int | tuple[int, ...]) -> np.ndarray:
    """A value broadcast to a grid of `shape`, in flat (C) order."""
    return np.broadcast_to(value, (shape,) if isinstance(shape, int) else shape).reshape(-1)


_WHERE_FUNCS: dict[str, Callable[..., Any]] = {
    "Max": np.maximum, "max": np.maximum, "Min": np.minimum, "min": np.minimum,
    "Abs": np.abs, "abs": np.abs, "ceiling": np.ceil, "ceil": np.ceil, "floor": np.floor,
    "log": np.log, "sqrt": np.sqrt, "exp": np.exp,
}
_BINOPS = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply,
           ast.Div: np.true_divide, ast.FloorDiv: np.floor_divide, ast.Mod: np.mod,
           ast.Pow: np.power}
_CMPS = {ast.Lt: np.less, ast.LtE: np.less_equal, ast.Gt: np.greater,
         ast.GtE: np.greater_equal, ast.Eq: np.equal, ast.NotEq: np.not_equal}


class Where:
    """A filter over a config's names, e.g. `memory_per_gpu < 0.9 * hbm_capacity`.

    The text goes through the formula language's whitelist (`expr.parse`) and is then walked
    over NumPy arrays: it is data, never code. Unit names (GiB, ms, h, ...) stand for their size
    in SI base units; choices compare with their labels (`recompute == 'full'`).
    """

    def __init__(self, text: str, model: Any) -> None:
        from .expr import ExprError, parse

        self.text, self.model = text, model
        try:
            parsed = parse(text)
        except ExprError as exc:
            raise UsageError(f"--where '{text}': {exc}") from None
        self.tree = parsed.tree
        known = set(model.inputs) | set(model.constants) | set(model.quantities)
        self.names, self.units = set(), {}
        for name in sorted(parsed.names):
            if name in known:
                self.names.add(name)
                continue
            scale = _unit_scale(name)
            if scale is None:
                raise UsageError(f"--where '{text}': unknown name '{name}'"
                                 f"{did_you_mean(name, known)}; `dlformula list` shows them")
            self.units[name] = scale
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and _call_name(node) not in _WHERE_FUNCS:
                raise UsageError(f"--where '{text}': function '{_call_name(node)}' is not "
                                 f"available here; use {', '.join(sorted(_WHERE_FUNCS))}")

    def __call__(self, values: Mapping[str, Any], shape: int | tuple[int, ...]) -> np.ndarray:
        """Flat mask over a grid of `shape` (or n configs)."""
        return _flat(np.asarray(self._eval(self.tree, values), dtype=bool), shape)

    def _eval(self, node: ast.AST, v: Mapping[str, Any]) -> Any:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                raise UsageError(f"--where '{self.text}': compare text only with a choice "
                                 "input, e.g. recompute == 'full'")
            return node.value
        if isinstance(node, ast.Name):
            return v[node.id] if node.id in self.names else self.units[node.id]
        if isinstance(node, ast.BinOp):
            return _BINOPS[type(node.op)](self._eval(node.left, v), self._eval(node.right, v))
        if isinstance(node, ast.UnaryOp):
            x = self._eval(node.operand, v)
            if isinstance(node.op, ast.Not):
                return np.logical_not(x)
            return -x if isinstance(node.op, ast.USub) else x
        if isinstance(node, ast.BoolOp):
            join = np.logical_and if isinstance(node.op, ast.And) else np.logical_or
            vals = [self._eval(x, v) for x in node.values]
            out = vals[0]
            for x in vals[1:]:
                out = join(out, x)
            return out
        if isinstance(node, ast.Compare):
            left, out = node.left, True
            for op, right in zip(node.ops, node.comparators, strict=False):
                a, b = self._operands(left, right, v)
                out = np.logical_and(out, _CMPS[type(op)](a, b))
                left = right
            return out
        if isinstance(node, ast.IfExp):
            return np.where(self._eval(node.test, v), self._eval(node.body, v),
                            self._eval(node.orelse, v))
        if isinstance(node, ast.Call):
            args = [self._eval(a, v) for a in node.args]
            f = _WHERE_FUNCS[_call_name(node)]
            if f in (np.maximum, np.minimum):
                result = args[0]
                for a in args[1:]:
                    result = f(result, a)
                return result
            return f(*args)
        raise UsageError(f"--where '{self.text}': this form is not supported")

    def _operands(self, left: ast.AST, right: ast.AST, v: Mapping[str, Any]) -> tuple[Any, Any]:
        def code(name_node: ast.AST, text_node: ast.AST) -> Any:
            if not (isinstance(text_node, ast.Constant) and isinstance(text_node.value, str)):
                return None
            d = (self.model.inputs.get(name_node.id) if isinstance(name_node, ast.Name)
                 else None)
            if d is None or not d.choices:
                raise UsageError(f"--where '{self.text}': compare text only with a choice "
                                 "input, e.g. recompute == 'full'")
            codes = dict(d.choices)
            if text_node.value not in codes:
                raise UsageError(f"--where '{self.text}': {d.name} is one of "
                                 f"{', '.join(codes)}")
            return codes[text_node.value]

        c = code(left, right)
        if c is not None:
            return self._eval(left, v), c
        c = code(right, left)
        if c is not None:
            return c, self._eval(right, v)
        return self._eval(left, v), self._eval(right, v)


def _call_name(node: ast.Call) -> str:
    return node.func.id if isinstance(node.func, ast.Name) else ""  # (parse allows no other)


def _unit_scale(name: str) -> float | None:
    from .units import UNITS

    u = UNITS.get(name)
    return None if u is None or name in ("1",) else u.scale
