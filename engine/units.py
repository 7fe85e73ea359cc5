"""Units: parse unit text, check dimensions, convert to SI base units.

Five base dimensions matter for training cost: byte, second, FLOP, US dollar and joule. Counts
(tokens, GPUs, parameters, layers, ...) are dimensionless but keep their names for display. A unit
is a scale (to SI base) and a dimension vector; unit text such as `GB/s`, `USD/(GPU*h)` or
`byte**2` is parsed with Python's `ast` against a whitelist, never evaluated.

Dimension checking is deliberately only about dimensions: `training_days` in `day` and
`training_time` in `s` share the time dimension; the formula writer converts the scale.

Powers are integers in unit text, so a dimension is a tuple of ints; the formula language may
raise a dimension to a fractional power (`sqrt`), which makes its entries Fractions (equal and
hashing equal to the ints where they are whole). Neither `fractions` nor `ast` is imported for
the units a config or hardware file uses on the start-up path; parsed units are remembered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from fractions import Fraction

BASE = ("byte", "s", "FLOP", "USD", "J")

Dim = tuple[Any, ...]  # int or Fraction powers, one per BASE
DIMENSIONLESS: Dim = tuple(0 for _ in BASE)


def _dim(**powers: int) -> Dim:
    return tuple(powers.get(b, 0) for b in BASE)


class Unit(NamedTuple):
    scale: float  # multiply a value in this unit by `scale` to get SI base units
    dim: Dim

    def __mul__(self, other: Unit) -> Unit:  # type: ignore[override]  # units, not tuples
        return Unit(self.scale * other.scale, tuple(a + b for a, b in zip(self.dim, other.dim)))

    def __truediv__(self, other: Unit) -> Unit:
        return Unit(self.scale / other.scale, tuple(a - b for a, b in zip(self.dim, other.dim)))

    def __pow__(self, p: int | Fraction) -> Unit:
        return Unit(self.scale ** float(p), tuple(a * p for a in self.dim))


_B = _dim(byte=1)
_S = _dim(s=1)
_F = _dim(FLOP=1)
_USD = _dim(USD=1)
_J = _dim(J=1)
_W = _dim(J=1, s=-1)

UNITS: dict[str, Unit] = {
    "1": Unit(1.0, DIMENSIONLESS),
    # information
    "bit": Unit(0.125, _B), "byte": Unit(1.0, _B), "B": Unit(1.0, _B),
    "kB": Unit(1e3, _B), "MB": Unit(1e6, _B), "GB": Unit(1e9, _B), "TB": Unit(1e12, _B),
    "PB": Unit(1e15, _B),
    "KiB": Unit(2.0**10, _B), "MiB": Unit(2.0**20, _B), "GiB": Unit(2.0**30, _B),
    "TiB": Unit(2.0**40, _B),
    "Mb": Unit(1e6 / 8, _B), "Gb": Unit(1e9 / 8, _B), "Tb": Unit(1e12 / 8, _B),
    # time
    "s": Unit(1.0, _S), "ms": Unit(1e-3, _S), "us": Unit(1e-6, _S), "ns": Unit(1e-9, _S),
    "min": Unit(60.0, _S), "h": Unit(3600.0, _S), "day": Unit(86400.0, _S),
    # work
    "FLOP": Unit(1.0, _F), "GFLOP": Unit(1e9, _F), "TFLOP": Unit(1e12, _F),
    "PFLOP": Unit(1e15, _F), "EFLOP": Unit(1e18, _F), "ZFLOP": Unit(1e21, _F),
    # money and energy
    "USD": Unit(1.0, _USD),
    "J": Unit(1.0, _J), "kJ": Unit(1e3, _J), "MJ": Unit(1e6, _J), "Wh": Unit(3600.0, _J),
    "kWh": Unit(3.6e6, _J), "MWh": Unit(3.6e9, _J), "GWh": Unit(3.6e12, _J),
    "W": Unit(1.0, _W), "kW": Unit(1e3, _W), "MW": Unit(1e6, _W),
}
# Named counts: dimensionless, kept for readable unit text.
for _count in ("GPU", "node", "token", "sequence", "parameter", "layer", "step", "element",
               "head", "microbatch", "expert", "stage", "bucket", "message", "percent"):
    UNITS[_count] = Unit(0.01 if _count == "percent" else 1.0, DIMENSIONLESS)


class UnitSyntaxError(ValueError):
    pass


MAX_UNIT_LENGTH = 200
MAX_UNIT_POWER = 12
_PARSED: dict[str, Unit] = {}  # unit text -> Unit, for texts that needed parsing


def parse_unit(text: str | int | float) -> Unit:
    """Parse unit text such as `GB/s`, `USD/(GPU*h)`, `FLOP`, `1`."""
    text = str(text).strip()
    unit = UNITS.get(text) or _PARSED.get(text)
    if unit is not None:
        return unit
    if len(text) > MAX_UNIT_LENGTH:
        raise UnitSyntaxError(f"unit text longer than {MAX_UNIT_LENGTH} characters: "
                              f"'{text[:20]}...'")
    try:
        unit = _quick_parse(text)
        if unit is None:
            import ast  # the full reader: the exact message for any text the quick one refuses

            try:
                tree = ast.parse(text, mode="eval")
            except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
                raise UnitSyntaxError(f"cannot read unit '{text}'") from exc
            unit = _unit_node(tree.body, text)
    except (OverflowError, ZeroDivisionError, RecursionError):
        unit = None
    import math

    if unit is None or not (math.isfinite(unit.scale) and unit.scale > 0) \
            or any(abs(p) > MAX_UNIT_POWER for p in unit.dim):
        raise UnitSyntaxError(f"unit '{text}' is out of range (powers up to "
                              f"{MAX_UNIT_POWER}, a scale a float can hold)")
    if len(_PARSED) < 4096:
        _PARSED[text] = unit
    return unit


def _quick_parse(text: str) -> Unit | None:
    """`GB/s`, `USD/(GPU*h)`, `byte**2`: known names and `1` joined by `*`, `/`, `**` with a
    whole exponent and parentheses, read the way Python's grammar reads them, without
    importing ast. None for anything else (including every error): `_unit_node` decides."""
    import re

    tokens = re.findall(r"[A-Za-z_][A-Za-z0-9_]*|[1-9][0-9]*|0|\*\*|[*/()]|\S", text)
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def atom() -> Unit | None:
        nonlocal pos
        tok = peek()
        pos += 1
        if tok == "(":
            inner = expr()
            if inner is None or peek() != ")":
                return None
            pos += 1
            return inner
        if tok == "1":
            return UNITS["1"]
        return UNITS.get(tok) if tok and tok[0].isalpha() or tok == "_" else None

    def power() -> Unit | None:
        nonlocal pos
        base = atom()
        if base is None or peek() != "**":
            return base
        pos += 1
        exponent = peek()
        pos += 1
        if exponent is None or not exponent.isdigit():
            return None
        return base ** int(exponent)

    def expr() -> Unit | None:
        nonlocal pos
        left = power()
        while left is not None and peek() in ("*", "/"):
            op = peek()
            pos += 1
            right = power()
            if right is None:
                return None
            left = left * right if op == "*" else left / right
        return left

    unit = expr()
    return unit if unit is not None and pos == len(tokens) else None


def _unit_node(node: Any, text: str) -> Unit:
    import ast

    if isinstance(node, ast.Name):
        if node.id not in UNITS:
            from .errors import did_you_mean

            raise UnitSyntaxError(
                f"unknown unit '{node.id}' in '{text}'{did_you_mean(node.id, UNITS)}"
            )
        return UNITS[node.id]
    if isinstance(node, ast.Constant) and node.value == 1 and type(node.value) is int:
        return UNITS["1"]
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Mult):
            return _unit_node(node.left, text) * _unit_node(node.right, text)
        if isinstance(node.op, ast.Div):
            return _unit_node(node.left, text) / _unit_node(node.right, text)
        if isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant):
            exponent = node.right.value
            if type(exponent) is int:
                return _unit_node(node.left, text) ** exponent
    raise UnitSyntaxError(
        f"cannot read unit '{text}': use unit names joined by '*', '/' and integer '**'"
    )


def format_dim(dim: Dim) -> str:
    """Human text for a dimension vector, e.g. `byte/s`, `1` for dimensionless."""
    num = [(b, p) for b, p in zip(BASE, dim) if p > 0]
    den = [(b, -p) for b, p in zip(BASE, dim) if p < 0]

    def part(items: list[tuple[str, Any]]) -> str:
        return "*".join(b if p == 1 else f"{b}**{p}" for b, p in items)

    if not num and not den:
        return "1"
    top = part(num) or "1"
    if not den:
        return top
    bottom = part(den)
    return f"{top}/{bottom}" if len(den) == 1 else f"{top}/({bottom})"
