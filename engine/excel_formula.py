"""The Excel formula printer: a sympy `Printer` subclass (see excel_printer.py's docstring for
what it accepts and the two Excel traps it handles). Its own module so that sympy is imported
only when formulas are printed: `excel_printer.ExcelPrinter` imports it on first access."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import sympy
from sympy.printing.printer import Printer

from .excel_text import (
    _REL,
    PREC_ADD,
    PREC_ATOM,
    PREC_MUL,
    PREC_POW,
    ExcelPrintError,
    _is_negative,
    _may_fail,
    _prec,
    _short,
    number_text,
)


class ExcelPrinter(Printer):
    """Print a sympy expression as the text of an Excel formula (without the leading '=').

    `names` maps each symbol name to the defined name the workbook gives it; a symbol missing
    from it is an error. Functions print in the spreadsheet form the function table gives them
    (expr.excel_forms: the built-ins' and the plugins'); `functions` adds or replaces forms.
    """

    printmethod = "_excel"

    def __init__(self, names: Mapping[str, str], functions: Mapping[str, str] | None = None
                 ) -> None:
        from .expr import excel_forms

        super().__init__()
        self.names = names
        self.functions = {**excel_forms(), **(functions or {})}

    # -- entry points -------------------------------------------------------------------------
    def formula(self, expr: Any) -> str:
        """'=' followed by the Excel text of `expr`."""
        return "=" + self.doprint(expr)

    def emptyPrinter(self, expr: Any) -> str:  # noqa: N802 (sympy's hook name)
        raise ExcelPrintError(f"no spreadsheet equivalent for {type(expr).__name__} "
                              f"({_short(expr)})")

    def _wrap(self, expr: Any, min_prec: int) -> str:
        """The text of `expr`, in parentheses when it binds looser than `min_prec`."""
        text = self._print(expr)
        return f"({text})" if _prec(expr) < min_prec else text

    # -- atoms --------------------------------------------------------------------------------
    def _print_Symbol(self, expr: Any) -> str:  # noqa: N802
        try:
            return self.names[expr.name]
        except KeyError:
            raise ExcelPrintError(f"the name '{expr.name}' has no cell in the workbook"
                                  ) from None

    def _print_Integer(self, expr: Any) -> str:  # noqa: N802
        v = int(expr)
        if abs(v) >= 2**53:  # beyond exact doubles: spreadsheets read it as a float anyway
            return number_text(float(v))
        return str(v)

    def _print_Rational(self, expr: Any) -> str:  # noqa: N802
        return f"({expr.p}/{expr.q})"

    def _print_Float(self, expr: Any) -> str:  # noqa: N802
        return number_text(float(expr))

    def _print_Exp1(self, expr: Any) -> str:  # noqa: N802
        return "EXP(1)"

    def _print_Pi(self, expr: Any) -> str:  # noqa: N802
        return "PI()"

    def _print_BooleanTrue(self, expr: Any) -> str:  # noqa: N802
        return "TRUE"

    def _print_BooleanFalse(self, expr: Any) -> str:  # noqa: N802
        return "FALSE"

    def _print_Infinity(self, expr: Any) -> str:  # noqa: N802
        raise ExcelPrintError("the formula is infinite")

    _print_NegativeInfinity = _print_Infinity
    _print_ComplexInfinity = _print_Infinity
    _print_NaN = _print_Infinity

    # -- arithmetic ---------------------------------------------------------------------------
    def _print_Add(self, expr: Any) -> str:  # noqa: N802
        terms = list(expr.args)
        # Positive terms first reads better and avoids a leading unary minus.
        terms.sort(key=lambda t: _is_negative(t))
        out = self._wrap(terms[0], PREC_ADD)
        for t in terms[1:]:
            if _is_negative(t):
                out += "-" + self._wrap(-t, PREC_MUL)
            else:
                out += "+" + self._wrap(t, PREC_ADD)
        return out

    def _print_Mul(self, expr: Any) -> str:  # noqa: N802
        coeff, factors = expr.as_coeff_mul()
        negative = coeff < 0
        if negative:
            coeff = -coeff
        num: list[Any] = []
        den: list[Any] = []
        if coeff != 1:
            if isinstance(coeff, sympy.Rational) and not isinstance(coeff, sympy.Integer):
                if coeff.p != 1:
                    num.append(sympy.Integer(coeff.p))
                den.append(sympy.Integer(coeff.q))
            else:
                num.append(coeff)
        for f in factors:
            if isinstance(f, sympy.Pow) and f.exp.is_Rational and f.exp < 0:
                den.append(f.base if f.exp == -1 else sympy.Pow(f.base, -f.exp,
                                                                 evaluate=False))
            else:
                num.append(f)
        parts = [self._wrap(f, PREC_POW) for f in num]
        if negative and num and _prec(num[0]) == PREC_POW:
            parts[0] = f"({parts[0]})"  # -(x^2), never -x^2: Excel reads that as (-x)^2
        top = "*".join(parts) if parts else "1"
        if den:
            bottom = (self._wrap(den[0], PREC_POW) if len(den) == 1
                      else "(" + "*".join(self._wrap(f, PREC_POW) for f in den) + ")")
            top = f"{top}/{bottom}"
        return "-" + top if negative else top

    def _print_Pow(self, expr: Any) -> str:  # noqa: N802
        base, exp = expr.args
        if exp == sympy.S.Half:
            return f"SQRT({self._print(base)})"
        if exp.is_Rational and exp < 0:
            inv = base if exp == -1 else sympy.Pow(base, -exp, evaluate=False)
            return "1/" + self._wrap(inv, PREC_POW)
        return f"{self._wrap(base, PREC_ATOM)}^{self._wrap(exp, PREC_ATOM)}"

    # -- functions ----------------------------------------------------------------------------
    def _call(self, name: str, args: Iterable[Any]) -> str:
        return f"{name}(" + ",".join(self._print(a) for a in args) + ")"

    def _print_Function(self, expr: Any) -> str:  # noqa: N802
        name = type(expr).__name__
        excel = self.functions.get(name)
        if not excel:
            raise ExcelPrintError(f"the function {name}() has no spreadsheet form (a plugin "
                                  "function gives one as its `excel` name)")
        if "{}" not in excel:
            return self._call(excel, expr.args)
        if excel.count("{}") != len(expr.args):
            raise ExcelPrintError(f"{name}() with {len(expr.args)} argument(s) has no "
                                  f"spreadsheet form (its form {excel} takes "
                                  f"{excel.count('{}')})")
        return excel.format(*(self._print(a) for a in expr.args))

    # Max, Min and friends are not Function subclasses in every sympy version's MRO walk order.
    _print_Max = _print_Function
    _print_Min = _print_Function
    _print_Abs = _print_Function
    _print_Mod = _print_Function
    _print_log = _print_Function
    _print_exp = _print_Function
    _print_ceiling = _print_Function
    _print_floor = _print_Function

    def _print_Piecewise(self, expr: Any) -> str:  # noqa: N802
        return self._if(list(expr.args))

    def _if(self, pairs: list[Any]) -> str:
        # The same reading as the generated Python code: the first pair whose condition holds;
        # the last pair's value when it is the only one left.
        (value, cond), rest = pairs[0], pairs[1:]
        if cond is sympy.true or not rest:
            return self._print(value)
        return f"IF({self._print(cond)},{self._print(value)},{self._if(rest)})"

    # -- logic --------------------------------------------------------------------------------
    def _print_Relational(self, expr: Any) -> str:  # noqa: N802
        op = _REL.get(expr.rel_op)
        if op is None:
            raise ExcelPrintError(f"the comparison {expr.rel_op} has no spreadsheet equivalent")
        text = f"{self._wrap(expr.lhs, PREC_ADD)}{op}{self._wrap(expr.rhs, PREC_ADD)}"
        if _may_fail(expr):
            # The engine computes x/0 and MOD(x, 0) as NaN, which compares unequal to
            # everything; a spreadsheet raises #DIV/0!, which AND/OR/IF pass on even from an
            # argument that cannot change the result. Give the comparison NaN's answer instead.
            return f"IFERROR({text},{'TRUE' if op == '<>' else 'FALSE'})"
        return text

    def _print_And(self, expr: Any) -> str:  # noqa: N802
        return self._call("AND", expr.args)

    def _print_Or(self, expr: Any) -> str:  # noqa: N802
        return self._call("OR", expr.args)

    def _print_Not(self, expr: Any) -> str:  # noqa: N802
        return self._call("NOT", expr.args)
