"""What the Excel formula printer and the workbook share: Excel's precedence levels, the
print error, and how a number or an expression reads.
No sympy at import (the helpers that inspect an expression import it when called)."""

from __future__ import annotations

from typing import Any

# Precedence of what a printed piece is, Excel's rules: comparison < + - < * / < ^ < unary -.
PREC_REL, PREC_ADD, PREC_MUL, PREC_POW, PREC_NEG, PREC_ATOM = 1, 2, 3, 4, 5, 6
MAX_FORMULA = 8192  # characters Excel accepts in one formula

_REL = {"==": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


class ExcelPrintError(ValueError):
    """An expression has a part with no spreadsheet equivalent."""


def _plain(e: Any) -> str:
    return " ".join(str(e).split())


def _short(expr: Any) -> str:
    text = str(expr)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_negative(term: Any) -> bool:
    import sympy

    if term.is_Number:
        return bool(term < 0)
    if isinstance(term, sympy.Mul):
        c, _ = term.as_coeff_Mul()
        return bool(c.is_Number and c < 0)
    return False


def _may_fail(expr: Any) -> bool:
    """Whether a spreadsheet could raise an error computing `expr` (a division, MOD, LN, a
    fractional power) where the engine gets NaN or infinity."""
    import sympy

    for node in sympy.preorder_traversal(expr):
        if isinstance(node, (sympy.Mod, sympy.log)):
            return True
        if isinstance(node, sympy.Pow) and not (node.exp.is_Integer and node.exp > 0):
            return True
    return False


def _prec(expr: Any) -> int:
    """How tightly the printed form of `expr` binds (see the PREC_ constants)."""
    import sympy

    if isinstance(expr, sympy.Add):
        return PREC_ADD
    if isinstance(expr, sympy.Mul):
        return PREC_MUL
    if isinstance(expr, sympy.Pow):
        if expr.exp == sympy.S.Half:
            return PREC_ATOM  # SQRT(x)
        if expr.exp.is_Rational and expr.exp < 0:
            return PREC_MUL  # 1/x
        return PREC_POW
    if isinstance(expr, (sympy.core.relational.Relational)):
        return PREC_REL
    if isinstance(expr, (sympy.Integer, sympy.Float)) and expr < 0:
        return PREC_NEG
    return PREC_ATOM  # names, function calls, IF(...), (p/q)


def number_text(v: float) -> str:
    """A number as formula text: integers plainly, others exactly (repr), with a capital E."""
    v = float(v)
    if v != v or v in (float("inf"), float("-inf")):
        raise ExcelPrintError("the formula contains a number that is not finite")
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(v).upper()  # 1e-06 -> 1E-06, the spelling every spreadsheet reads
