"""Excel text: formulas (a sympy printer subclass), defined names, numbers, human units.

The printer accepts exactly the sympy node types the formula language builds (plus the functions
a plugin registers with an `excel` name) and raises `ExcelPrintError` for anything else, so a
surprise becomes an export-time error naming the quantity, never a wrong cell.

Two Excel traps it handles: unary minus binds tighter than `^` (`-x^2` is `(-x)^2` in Excel), and
`^` is left-associative (`2^3^2` is 64); powers are therefore always parenthesised where it
matters. `floor` prints as INT (exact round-down in Excel and LibreOffice alike) and `ceiling` as
CEILING(x, 1), which both round towards +infinity for negative numbers too.

sympy is imported only when formulas are printed: `ExcelPrinter` lives in excel_formula.py and is
imported on first access (a module `__getattr__`), so an export whose formulas come from the
cache never pays the 0.3 s.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .core_functions import functions as core_functions
from .errors import ModelError
from .excel_text import (  # noqa: F401  (re-exported: the printer's text rules)
    _REL,
    MAX_FORMULA,
    PREC_ADD,
    PREC_ATOM,
    PREC_MUL,
    PREC_NEG,
    PREC_POW,
    PREC_REL,
    ExcelPrintError,
    _is_negative,
    _may_fail,
    _plain,
    _prec,
    _short,
    number_text,
)


def __getattr__(name: str) -> Any:
    if name == "ExcelPrinter":
        from .excel_formula import ExcelPrinter

        globals()["ExcelPrinter"] = ExcelPrinter
        return ExcelPrinter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def printed_formulas(engine: Any, names: dict[str, str]) -> dict[str, Any]:
    """Excel text of every formula and constraint (see `print_formulas`).

    Printing needs the sympy expressions, whose import and construction take most of an export;
    the text is therefore cached beside the compiled model, keyed by the formula files, the
    names and the exporter's own code, and a warm export never imports sympy.
    """
    from . import __version__, cache
    from .expr import known_function_names

    model = engine.model
    key = hashlib.sha256(f"{model.digest}|{__version__}".encode())
    # edited code: print afresh
    for module in ("excel.py", "excel_printer.py", "excel_formula.py", "excel_text.py", "expr.py"):
        try:
            key.update((Path(__file__).parent / module).read_bytes())
        except OSError:
            pass
    key.update(json.dumps([names, sorted(known_function_names())]).encode())
    entry = f"excel-{key.hexdigest()[:32]}.json"
    if engine.use_cache:
        try:
            cached = json.loads(cache.read_bytes(entry) or b"")
            if set(cached["quantities"]) == set(model.quantities):
                return dict(cached)
        except (ValueError, KeyError, TypeError):
            pass  # missing or damaged: print afresh
    printed = print_formulas(engine.formula_set, names)
    if engine.use_cache:  # (a read-only cache only makes the next export slower)
        cache.write_bytes(entry, json.dumps(printed).encode("utf-8"))
    return printed


def print_formulas(fs: Any, names: Mapping[str, str],
                   functions: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Every quantity's formula, which quantities are conditions used as numbers, and every
    constraint and warning with its condition as Excel text; an error names the quantity or
    constraint."""
    printer = __getattr__("ExcelPrinter")(names, functions)
    quantities, flags = {}, []
    for name, q in fs.quantities.items():
        try:
            expr = fs.exprs[name]
            text = printer.formula(expr)
            if len(text) > MAX_FORMULA:
                raise ExcelPrintError(f"the formula is {len(text)} characters long, more than "
                                      f"a spreadsheet cell takes ({MAX_FORMULA}); split it into "
                                      "named parts")
        except ExcelPrintError as exc:
            raise ModelError(f"cannot export quantity '{name}' to Excel: {exc}; rewrite the "
                             "formula with the functions docs/excel.md lists",
                             q.path, q.expr_line or q.line) from None
        quantities[name] = text
        if is_flag(expr):
            flags.append(name)
    checks = []
    for c, cond in zip(fs.constraints, fs.conditions, strict=True):
        try:
            checks.append({"name": c.name, "check": c.check, "message": c.message,
                           "where": f"{c.path}:{c.line}", "excel": printer.doprint(cond),
                           "kind": getattr(c, "kind", "constraint")})
        except ExcelPrintError as exc:
            raise ModelError(f"cannot export constraint '{c.name}' to Excel: {exc}",
                             c.path, c.line) from None
    breakdowns = {total: [[label, printer.doprint(part), text] for label, part, text in
                          breakdown(fs, total)]
                  for total in BREAKDOWNS if total in fs.exprs}
    return {"quantities": quantities, "flags": flags, "checks": checks, "breakdowns": breakdowns}


BREAKDOWNS = ("memory_per_gpu", "step_time")  # totals whose parts Summary tables and charts


def breakdown(fs: Any, total: str) -> list[tuple[str, Any, str]]:
    """The additive parts of a quantity, read from the formulas' structure: (name as in `eval`,
    sympy expression, what it is). A sum is split into its terms, a term `x * (1 + f)` into `x`'s
    parts plus the overhead `f * x`, and a quantity defined as a sum of named quantities into
    those; anything else is one part. The parts add up to the total by construction.
    """
    import sympy

    exprs = fs.exprs

    def split(e: Any, depth: int, text: str) -> list[tuple[str, Any, str]]:
        if isinstance(e, sympy.Add):
            return [p for t in _ordered_terms(e, text) for p in split(t, depth, text)]
        if isinstance(e, sympy.Symbol):
            sub = exprs.get(e.name)
            if (depth < 3 and isinstance(sub, sympy.Add)
                    and all(isinstance(a, sympy.Symbol) for a in sub.args)):
                return split(sub, depth + 1, fs.quantities[e.name].expr)
            return [(e.name, e, e.name)]
        if isinstance(e, sympy.Mul):
            for f in e.args:  # x * (1 + f): the parts of x, then the overhead f * x
                if isinstance(f, sympy.Add) and sympy.S.One in f.args:
                    rest = sympy.Mul(*[a for a in e.args if a is not f])
                    extra = sympy.Add(*[a for a in f.args if a != 1])
                    label = extra.name if isinstance(extra, sympy.Symbol) else str(extra)
                    return [*split(rest, depth, text),
                            (label, extra * rest, f"{label} x ({_plain(rest)})")]
        return [(_plain(e), e, _plain(e))]

    return split(exprs[total], 0, fs.quantities[total].expr)


def _ordered_terms(e: Any, text: str) -> list[Any]:
    """The terms of a sum in the order the formula file writes them."""
    def key(t: Any) -> tuple[int, str]:
        found = [m.start() for s in t.free_symbols
                 for m in [re.search(rf"\b{re.escape(s.name)}\b", text)] if m]
        return (min(found) if found else len(text), str(t))
    return sorted(e.args, key=key)


# -- defined names ------------------------------------------------------------------------------
_A1 = re.compile(r"^[A-Za-z]{1,3}[0-9]+$")
_R1C1 = re.compile(r"^[Rr][0-9]*([Cc][0-9]*)?$|^[Cc][0-9]*$")
_VALID = re.compile(r"^[A-Za-z_\\][A-Za-z0-9_.]*$")
# Names a spreadsheet reads as something else: booleans, functions the workbook writes, and the
# spreadsheet functions of the built-in formula functions (core_functions: MAX, CEILING, ...).
_RESERVED = {"TRUE", "FALSE", "IF", "AND", "OR", "NOT", "PI", "INDEX", "MATCH", "IFERROR",
             "COUNTIF", *(re.sub(r"\(.*", "", f.excel) for f in core_functions() if f.excel)}
MAX_NAME = 255


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a workbook defined name as it is, or None when it can."""
    if not _VALID.match(name):
        return "has characters a defined name cannot hold"
    if _A1.match(name):
        return "reads as a cell reference"
    if _R1C1.match(name):
        return "reads as an R1C1 reference"
    if name.upper() in _RESERVED:
        return "is a spreadsheet keyword or function"
    if len(name) > MAX_NAME:
        return "is longer than 255 characters"
    return None


def excel_names(names: Iterable[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Map each dlformula name to a defined name; return (mapping, reasons for changed ones).

    A name that would be misread (`h100`, `tp1`, `r`, `c`, `R1C1`, `true`) gets a leading
    underscore, which no dlformula name has, so it cannot clash with another name; characters a
    defined name cannot hold become '_'. Defined names are case-insensitive, so names equal but
    for case are told apart with a numeric suffix.
    """
    mapping: dict[str, str] = {}
    reasons: dict[str, str] = {}
    taken: set[str] = set()
    for name in names:
        out, reason = name, name_problem(name)
        if reason:
            if not _VALID.match(out):
                out = re.sub(r"[^A-Za-z0-9_.]", "_", out)
            out = "_" + out[: MAX_NAME - 1]
        if out.upper() in taken:
            n = 2
            while f"{out}_{n}".upper() in taken:
                n += 1
            out, reason = f"{out}_{n}", reason or "differs from another name only by case"
        taken.add(out.upper())
        mapping[name] = out
        if out != name:
            reasons[name] = reason or ""
    return mapping, reasons


def excel_string(text: str) -> str:
    """A string literal for a formula."""
    return '"' + text.replace('"', '""') + '"'


# -- values and validation ---------------------------------------------------------------------
def is_flag(expr: Any) -> bool:
    """A condition used as a number: Piecewise((1, cond), (0, True))."""
    if expr is None or type(expr).__name__ != "Piecewise" or len(expr.args) != 2:
        return False
    (a, _), (b, last) = expr.args
    return bool(a == 1 and b == 0 and last == True)  # noqa: E712 (sympy.true)


def validation_formula(domain: Any, cell: str) -> str | None:
    """A custom data-validation rule for a numeric domain, or None when anything goes."""
    if domain.kind not in ("integer", "number"):
        return None
    parts = [f"ISNUMBER({cell})"]
    if domain.kind == "integer":
        parts.append(f"{cell}=INT({cell})")
    if domain.lo is not None:
        parts.append(f"{cell}{'>=' if domain.lo_inclusive else '>'}{number_text(domain.lo)}")
    if domain.hi is not None:
        parts.append(f"{cell}{'<=' if domain.hi_inclusive else '<'}{number_text(domain.hi)}")
    return f"AND({','.join(parts)})"
