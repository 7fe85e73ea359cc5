"""Human units: pick a readable unit for a value from its dimension (GiB, TFLOP/s, ms, days).
Small and import-light: eval tables, constraint and warning messages all use it."""

from __future__ import annotations

import math
from typing import Any

from .units import Dim, parse_unit

_B = (1, 0, 0, 0, 0)
_S = (0, 1, 0, 0, 0)
_F = (0, 0, 1, 0, 0)
_USD = (0, 0, 0, 1, 0)
_J = (0, 0, 0, 0, 1)


# The readable units, per dimension (byte, s, FLOP, USD, J exponents): the number format
# ("2f" or "4g") and the steps (threshold and divisor in SI, unit name), largest first. The one
# table: `human()` reads it, and the workbook's spreadsheet formulas are built from it
# (excel_human.py). A byte is "byte", never "B": "B" is a billion (COUNT_STEPS).
STEPS: dict[tuple[int, ...], tuple[str, list[tuple[float, str]]]] = {
    _B: ("2f", [(2.0**70, "ZiB"), (2.0**60, "EiB"), (2.0**50, "PiB"), (2.0**40, "TiB"),
                (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"), (1.0, "byte")]),
    (1, -1, 0, 0, 0): ("4g", [(1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1.0, "byte/s")]),
    _F: ("4g", [(1e21, "ZFLOP"), (1e18, "EFLOP"), (1e15, "PFLOP"), (1e12, "TFLOP"),
                (1e9, "GFLOP"), (1.0, "FLOP")]),
    (0, -1, 1, 0, 0): ("4g", [(1e18, "EFLOP/s"), (1e15, "PFLOP/s"), (1e12, "TFLOP/s"),
                              (1e9, "GFLOP/s"), (1.0, "FLOP/s")]),
    _J: ("4g", [(3.6e12, "GWh"), (3.6e9, "MWh"), (3.6e6, "kWh"), (3600.0, "Wh"), (1.0, "J")]),
    (0, -1, 0, 0, 1): ("4g", [(1e6, "MW"), (1e3, "kW"), (1.0, "W")]),
}
# Time: (upper limit in s, divisor, name); the last has no limit.
TIME_STEPS: list[tuple[float | None, float, str]] = [
    (1e-3, 1e-6, "us"), (1.0, 1e-3, "ms"), (300.0, 1.0, "s"), (3 * 3600.0, 60.0, "min"),
    (3 * 86400.0, 3600.0, "h"), (None, 86400.0, "days")]
# Counts of a unit (parameter, token, GPU*h): thousand, million, billion, trillion.
COUNT_STEPS = [(1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")]
# A unit that reads best as itself (GPU*h), and token rates: the same prefixes, fewer of them.
GPU_STEPS = [(1e9, "B"), (1e6, "M"), (1e3, "k"), (1.0, "")]
TOKEN_RATE_STEPS = [(1e6, "M"), (1e3, "k"), (1.0, "")]


def _key(dim: Dim) -> tuple[int, ...]:
    return tuple(int(x) for x in dim)


def _step(v: float, steps: list[tuple[float, str]]) -> tuple[float, str]:
    """(divisor, prefix or unit) of the largest step `v` reaches (the last if none)."""
    for factor, name in steps:
        if abs(v) >= factor:
            return factor, name
    return steps[-1]


def _num(v: float, digits: int = 4) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 2**1000:
        return big_int_text(v)
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-3:
        return f"{v:.{digits - 1}e}"
    return f"{v:.{digits}g}" if abs(v) < 1000 else f"{v:,.0f}"


def big_int_text(v: int) -> str:
    """`1.234e+400` for an integer too large for a float (int -> str is bounded by Python's
    digit limit, so the digits are counted from bit_length beyond it)."""
    sign = "-" if v < 0 else ""
    v = abs(v)
    try:
        digits = str(v)
    except ValueError:  # more digits than sys.get_int_max_str_digits()
        exponent = int(v.bit_length() * 0.30102999566398120)
        return f"{sign}~1e+{exponent}"
    return f"{sign}{digits[0]}.{digits[1:4] or '0'}e+{len(digits) - 1}"


def human(value: Any, unit: str) -> tuple[str, str]:
    """(number text, unit text) in a unit a person would pick."""
    if isinstance(value, bool):
        return ("yes" if value else "no"), ""
    try:
        v = float(value)
    except OverflowError:  # an integer beyond what a float holds: its digits, shortened
        return big_int_text(int(value)), "" if unit == "1" else unit
    except (TypeError, ValueError):
        return str(value), ""
    if not math.isfinite(v):
        return str(v), unit
    if abs(v) >= 1e18 or (v and abs(v) < 1e-18):  # far outside any unit's range: plain e-form
        try:
            u = parse_unit(unit)
        except Exception:
            return f"{v:.4g}", unit
        if u.dim == (0, 0, 0, 0, 0) or abs(v * u.scale) >= 1e27 or abs(v * u.scale) < 1e-27:
            return f"{v:.4g}", "" if unit == "1" else unit
    scale, divisor, name, fmt = _choice(v, unit)
    n = v * scale / divisor
    if fmt == "2f":
        return f"{n:.2f}", name
    if fmt == "4g":
        return f"{n:.4g}", name
    if fmt == "usd":
        if abs(n) >= 1e15:
            return f"{n:.4g}", name
        return f"{n:,.0f}" if abs(n) >= 100 else f"{n:.2f}", name
    return ("0" if n == 0 else _num(n)), name


def readable_unit(value: float, unit: str) -> tuple[float, str]:
    """(divisor, unit text): `value` (in `unit`, as the formula declares it) divided by the
    divisor reads in the unit `human()` would print it in. Plots scale an axis by it, taking
    the largest value on the axis: the one choice of readable unit."""
    if not math.isfinite(value):
        value = 0.0
    scale, divisor, name, _ = _choice(value, unit)
    return divisor / scale, name


def _choice(v: float, unit: str) -> tuple[float, float, str, str]:
    """How `human()` shows `v` (in `unit`): the scale to SI (1 where the unit reads best as
    itself), the divisor from there, the unit text and the number's format ("2f", "4g", "usd"
    or "num": `_num`)."""
    u = parse_unit(unit)
    if "GPU" in unit and u.scale != 1:  # GPU*h and the like read best in their own unit
        divisor, name = _step(v, GPU_STEPS)
        return 1.0, divisor, f"{name} {unit}".strip(), "4g"
    si = v * u.scale
    k = _key(u.dim)
    if k in STEPS:
        fmt, steps = STEPS[k]
        divisor, name = _step(si, steps)
        return u.scale, divisor, name, fmt
    if k == _S:
        a = abs(si)
        if a == 0:
            return u.scale, 1.0, "s", "num"
        _, divisor, name = next(t for t in TIME_STEPS if t[0] is None or a < t[0])
        return u.scale, divisor, name, "4g"
    if k == _USD:
        return u.scale, 1.0, "USD", "usd"
    if k == (0, -1, 0, 0, 0) and unit.startswith("token"):
        divisor, name = _step(si, TOKEN_RATE_STEPS)
        return u.scale, divisor, f"{name} token/s".strip(), "4g"
    if k == (0, 0, 0, 0, 0) and unit not in ("1", "") and abs(v) >= 1e4:
        divisor, name = _step(v, COUNT_STEPS)
        return 1.0, divisor, f"{name} {unit}", "4g"
    return 1.0, 1.0, "" if unit == "1" else unit, "num"
