"""Human units as spreadsheet formulas: the rules of `humanize.human` written in Excel-2007
functions, so a workbook shows "202.50 GiB" where the CLI does, live, for whatever value a cell
holds after an edit (from humanize's one table: a byte reads "byte", "B" is a billion); and the
number formats of value cells (unit in the format, integers
without decimals, counts with k/M/B/T where B is a billion).

`human_text(ref, unit)` is an Excel expression (no leading '=') giving the text `human()` gives,
joined as "NUMBER UNIT". `placeholder(...)` is how a check message shows a `{name}` (the rules of
`CompiledModel.fill_message`). tests/test_excel_engines.py compares both with the engine.
"""

from __future__ import annotations

from collections.abc import Callable

from .humanize import COUNT_STEPS, GPU_STEPS, STEPS, TIME_STEPS, TOKEN_RATE_STEPS
from .units import parse_unit

# The readable units are humanize's own table (STEPS, TIME_STEPS, COUNT_STEPS): the formulas
# here are built from it, and the tests compare the recalculated texts with `human()` itself.


def num(v: float) -> str:
    """A number as short formula text: 1024, 0.001, 1E+15, 1E-06."""
    return f"{float(v):.15g}".upper()


def g4(x: str, zero: str | None = None) -> str:
    """Python's '{:.4g}' of the expression `x` (for |x| below 1e4, where it is not scientific);
    `zero` is a shorter expression that is 0 exactly when `x` is."""
    return f'IF({zero or x}=0,"0",ROUND({x},3-INT(LOG10(ABS({x}))))&"")'


def _scaled(x: str, steps: list[tuple[float, str]], fmt: str, suffix: str = "") -> str:
    """The first step whose threshold |x| reaches (the last one below all), formatted: one
    MATCH over the steps' lower bounds, the divisor and unit looked up from inline arrays."""
    asc = list(reversed(steps))
    bounds = ",".join(["0", *(num(f) for f, _ in asc[1:])])
    divisors = ",".join(num(f) for f, _ in asc)
    labels = ",".join('"' + (f"{n} {suffix}".strip() if suffix else n) + '"' for _, n in asc)
    k = f"MATCH(ABS({x}),{{{bounds}}},1)"
    v = f"{x}/INDEX({{{divisors}}},{k})"
    text = f'TEXT({v},"0.00")' if fmt == "2f" else g4(v, x)
    return f'{text}&" "&INDEX({{{labels}}},{k})'


def general(x: str) -> str:
    """humanize._num: 0; scientific beyond 1e5 or below 1e-3; 4 digits below 1000; else 1,234."""
    return (f'IF({x}=0,"0",IF(OR(ABS({x})>=100000,ABS({x})<0.001),'
            f'LOWER(TEXT({x},"0.000E+00")),IF(ABS({x})<1000,{g4(x)},TEXT({x},"#,##0"))))')


def human_text(ref: str, unit: str) -> str:
    """An Excel expression giving `' '.join(human(value, unit)).strip()` for the cell `ref`."""
    try:
        u = parse_unit(unit)
    except ValueError:
        return f'{general(ref)}&" {unit}"'
    key = tuple(int(x) for x in u.dim)
    si = ref if u.scale == 1 else f"{ref}*{num(u.scale)}"
    if "GPU" in unit and u.scale != 1:
        return _scaled(ref, GPU_STEPS, "4g", unit)
    if key in STEPS:
        fmt, steps = STEPS[key]
        return _scaled(si, steps, fmt)
    if key == (0, 1, 0, 0, 0):  # us below 1 ms, ms below 1 s, s below 300 s, min, h, days
        times = [(limit or 0.0, factor, name) for limit, factor, name in TIME_STEPS]
        bounds = ",".join(["0", *(num(lim) for lim, _, _ in times[:-1])])
        divisors = ",".join(num(f) for _, f, _ in times)
        labels = ",".join(f'"{n}"' for _, _, n in times)
        k = f"MATCH(ABS({si}),{{{bounds}}},1)"
        return (f'IF({si}=0,"0 s",{g4(f"{si}/INDEX({{{divisors}}},{k})", si)}&" "&'
                f"INDEX({{{labels}}},{k}))")
    if key == (0, 0, 0, 1, 0):
        return f'IF(ABS({si})>=100,TEXT({si},"#,##0"),TEXT({si},"0.00"))&" USD"'
    if key == (0, -1, 0, 0, 0) and unit.startswith("token"):
        return _scaled(si, TOKEN_RATE_STEPS, "4g", "token/s")
    tail = "" if unit in ("1", "") else f'&" {unit}"'
    if key == (0, 0, 0, 0, 0) and unit not in ("1", ""):
        big = _scaled(ref, COUNT_STEPS, "4g", unit)
        return f"IF(ABS({ref})>=10000,{big},{general(ref)}{tail})"
    return general(ref) + tail


def readable(value: object, unit: str) -> str:
    """What `human_text` shows for `value`: `human()`'s text (one table, humanize.STEPS)."""
    from .humanize import human

    return " ".join(human(value, unit)).strip()


def placeholder(ref: str, unit: str, choice: str | None = None, boolean: bool = False) -> str:
    """How a check message shows `{name}` (CompiledModel.fill_message): a choice's label, true or
    false, a whole number below 10,000 as it is, anything else in human units."""
    if choice is not None:
        return f'IF({choice},"true","false")' if boolean else choice
    return f'IF(AND({ref}=INT({ref}),ABS({ref})<10000),{ref}&"",{human_text(ref, unit)})'


# -- number formats of value cells -------------------------------------------------------------
def value_format(value: object, unit: str, integer: bool) -> str:
    """The number format of a value cell: its unit inside the format ("175.0 B parameter",
    "85,899,345,920 byte", "3.12E+14 FLOP/s", "0.0432 s"), whole numbers without decimals,
    counts with k/M/B/T (B always a billion), scientific beyond what a fixed format reads."""
    try:
        v = abs(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "General"
    whole = integer or float(value) == int(float(value))  # type: ignore[arg-type]
    tail = "" if unit in ("1", "") else '" ' + unit.replace('"', "") + '"'

    def counted(label: str) -> str:
        return '" ' + (label + " " + unit.replace('"', "")).strip() + '"'
    try:
        u = parse_unit(unit)
        key = tuple(int(x) for x in u.dim)
    except ValueError:
        u, key = None, None
    count = ("GPU" in unit) or (key == (0, 0, 0, 0, 0) and unit not in ("1", ""))
    if count and v >= 1e6:  # two scales around the exported value, plain digits below
        if v >= 1e12:
            return (f'[>=1E12]#,##0.0,,,,{counted("T")};[>=1E9]#,##0.0,,,{counted("B")};'
                    f"#,##0{tail}")
        if v >= 1e9:
            return (f'[>=1E9]#,##0.0,,,{counted("B")};[>=1E6]#,##0.0,,{counted("M")};'
                    f"#,##0{tail}")
        return f'[>=1E6]#,##0.0,,{counted("M")};#,##0{tail}'
    if key == (1, 0, 0, 0, 0):  # bytes: every byte up to a PiB, scientific beyond
        return f"#,##0{tail}" if v < 2**50 else f"0.00E+00{tail}"
    if key == (0, 0, 0, 1, 0):
        return f"#,##0{tail}" if v >= 100 else f"#,##0.00{tail}"
    plain = count or key in ((0, 1, 0, 0, 0), (0, 0, 0, 0, 0)) or key is None
    if v >= (1e15 if plain else 1e6):
        return f"0.00E+00{tail}"
    if whole and (integer or v >= 1000 or count):
        return f"#,##0{tail}"
    if v >= 1000:
        return f"#,##0.0{tail}"
    return f"General{tail}"  # 1, 1.2, 0.0432, 2.5E-05: the digits the value has


def render(value: object, fmt: str) -> str:
    """The text a spreadsheet shows for a number under the formats `value_format` writes
    (sections with [>=X] conditions, thousands separators, scaling commas, optional decimals,
    scientific, percent, quoted text), to size columns so no value shows as ###."""
    import re

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "" if value is None else str(value)
    v = float(value)
    if fmt.startswith("General"):
        text = f"{v:.10g}".replace("e", "E")
        return text + "".join(re.findall(r'"([^"]*)"', fmt))
    sections = _sections(fmt)
    chosen = sections[-1][1]
    for cond, body in sections:
        if cond is None or cond(v):
            chosen = body
            break
    texts = re.findall(r'"([^"]*)"', chosen)
    pattern = re.sub(r'"[^"]*"', "\x00", chosen)
    core = pattern.split("\x00")[0].strip()
    suffix = "".join(texts)
    if "E+" in core:
        mant = core.split("E")[0]
        digits = len(mant.split(".")[1]) if "." in mant else 0
        m, e = f"{v:.{digits}E}".split("E")
        return f"{m}E{int(e):+03d}{suffix}"
    if core.endswith("%"):
        v, core = v * 100, core[:-1]
        suffix = "%" + suffix
    scale = len(core) - len(core.rstrip(","))
    core = core.rstrip(",")
    v /= 1000.0 ** scale
    decimals = core.split(".")[1] if "." in core else ""
    fixed = len(decimals.rstrip("#"))
    text = f"{v:,.{len(decimals)}f}" if "," in core else f"{v:.{len(decimals)}f}"
    if len(decimals) > fixed:  # optional digits: trailing zeros dropped down to `fixed`
        whole, frac = text.split(".")
        frac = frac.rstrip("0").ljust(fixed, "0")
        text = f"{whole}.{frac}" if frac else whole
    return text + suffix


def _sections(fmt: str) -> list[tuple[Callable[[float], bool] | None, str]]:
    import re

    out: list[tuple[Callable[[float], bool] | None, str]] = []
    for part in fmt.split(";"):
        m = re.match(r"^\[(>=|>|<=|<)([-+0-9.E]+)\](.*)$", part)
        if m:
            op, lim = m.group(1), float(m.group(2))
            cond = {">=": lambda x, lim=lim: x >= lim, ">": lambda x, lim=lim: x > lim,
                    "<=": lambda x, lim=lim: x <= lim, "<": lambda x, lim=lim: x < lim}[op]
            out.append((cond, m.group(3)))
        else:
            out.append((None, part))
    return out
