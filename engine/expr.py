"""The formula language: expression text -> sympy, with dimensions checked. Never evaluated.

Formula text is parsed by Python's `ast` and walked against a whitelist: numbers, names,
arithmetic (`+ - * / // % **`), comparisons, `and`/`or`/`not`, `a if cond else b`, and calls to
the functions in `FUNCTIONS` (plugins may add more). Every other node -- attribute access,
subscripts, lambdas, comprehensions, keyword arguments, strings outside a choice comparison,
names starting with `_` -- is refused with a message saying what is allowed. The sympy objects
are built directly from the tree; `sympify`, `parse_expr`, `eval` and `exec` never see the text.

Two phases, so the loader can report undefined names before building anything:
`parse(text)` checks the syntax and returns the names used; `build(parsed, env)` makes the
sympy expression and its dimension.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .units import DIMENSIONLESS, Dim, format_dim

MAX_LENGTH = 4000
MAX_NODES = 1500
MAX_EXPONENT = 64


class ExprError(ValueError):
    """A formula text is not in the language, or its dimensions do not agree."""


@dataclass(frozen=True)
class FunctionSpec:
    """A function formulas may call: the one registry every stage reads (issue 17.2).

    `build` makes the sympy object; `dims` says how dimensions flow ("same": all arguments share
    a dimension, which the result has; "dimensionless": arguments and result are pure numbers;
    "first": the result has the first argument's dimension, the rest are pure numbers; "sqrt":
    half the argument's). The sympy object keeps the function's name (or is built from other
    entries: log2 from log, sqrt a power), and by that name the code generator finds `runtime`,
    the helper the generated code calls (runtime.py binds it to the declaration's `python` or
    `numpy` form), and the Excel
    printer finds `excel`: a spreadsheet function called with the arguments (`MAX`), or a form
    with `{}` for them (`CEILING({},1)`); empty when the function has no spreadsheet form, and
    `dlformula export` then refuses a formula that uses it.
    """

    name: str
    min_args: int
    max_args: int | None
    dims: str
    runtime: str
    excel: str
    doc: str
    build: Callable[..., Any] = field(compare=False)


def spec_of(fn: Any) -> FunctionSpec:
    """The table's entry for a `hookspecs.Function` (the core's or a plugin's): its sympy form
    is the builder it gives, else an opaque sympy function of its name, which generated code
    computes with its own implementation."""
    from .runtime import runtime_name

    lo, hi = fn.args if isinstance(fn.args, tuple) else (fn.args, fn.args)
    build = fn.sympy
    if build is None:
        import sympy

        build = sympy.Function(fn.name)
    return FunctionSpec(fn.name, lo, hi, fn.dims, runtime_name(fn.name), fn.excel, fn.doc,
                        build)


def _core_table() -> dict[str, FunctionSpec]:
    """The built-ins: what the core declares through its `functions` hook (core_functions.py),
    read without a plugin set, so the language knows them wherever a formula is parsed."""
    from .core_functions import functions as core_functions

    return {fn.name: spec_of(fn) for fn in core_functions()}


_FUNCTIONS: dict[str, FunctionSpec] = _core_table()


def functions() -> dict[str, FunctionSpec]:
    """The function table: formula name -> spec (the built-ins and the plugins' functions)."""
    return _FUNCTIONS


def runtime_names() -> dict[str, str]:
    """sympy function name -> the helper generated code calls (codegen, --where)."""
    return {name: spec.runtime for name, spec in _FUNCTIONS.items()}


def excel_forms() -> dict[str, str]:
    """sympy function name -> its spreadsheet form (the Excel printer)."""
    return {name: spec.excel for name, spec in _FUNCTIONS.items() if spec.excel}


# Names of calls the parser accepts before building; Piecewise is syntax, not a table entry.
_SPECIAL_CALLS = {"Piecewise"}
_BUILTIN_NAMES = frozenset(_FUNCTIONS)
_extra_function_names: set[str] = set()


def register_function(fn: Any) -> None:
    """Add a plugin's function (a `hookspecs.Function`) by the rules the built-ins' entries are
    made by (`spec_of`): formulas may call it, generated code calls its runtime name (bound to
    its `python` and `numpy` forms, see runtime.register_helper), the workbook writes its
    `excel` form. Registering a name again replaces it; built-in names cannot be replaced."""
    if fn.name in _BUILTIN_NAMES or fn.name in _SPECIAL_CALLS:
        raise ValueError(f"'{fn.name}' is a built-in function and cannot be redefined")
    if not fn.name.isidentifier() or fn.name.startswith("_"):
        raise ValueError(f"'{fn.name}' is not a valid function name (letters, digits, '_'; "
                         "not starting with '_')")
    spec = spec_of(fn)
    _FUNCTIONS[fn.name] = spec
    _extra_function_names.add(fn.name)
    from .runtime import register_helper

    register_helper(spec.runtime, fn.python, fn.numpy)


def reset_plugin_functions() -> None:
    """Forget every registered plugin function (a new plugin set is about to register its own)."""
    for name in list(_extra_function_names):
        _FUNCTIONS.pop(name, None)
    _extra_function_names.clear()


def known_function_names() -> set[str]:
    return set(_FUNCTIONS) | _SPECIAL_CALLS


@dataclass(frozen=True)
class Parsed:
    text: str
    tree: ast.expr
    names: frozenset[str]


_REFUSED = {
    ast.Attribute: "attribute access ('.{attr}') is not allowed",
    ast.Subscript: "subscripts ('x[...]') are not allowed",
    ast.Lambda: "lambda is not allowed",
    ast.ListComp: "comprehensions are not allowed",
    ast.SetComp: "comprehensions are not allowed",
    ast.DictComp: "comprehensions are not allowed",
    ast.GeneratorExp: "comprehensions are not allowed",
    ast.NamedExpr: "assignment (':=') is not allowed",
    ast.Starred: "'*' unpacking is not allowed",
    ast.JoinedStr: "f-strings are not allowed",
    ast.List: "lists are not allowed",
    ast.Dict: "dicts are not allowed",
    ast.Set: "sets are not allowed",
    ast.Await: "await is not allowed",
    ast.Yield: "yield is not allowed",
    ast.YieldFrom: "yield is not allowed",
}

_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
_COMPARES = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq, ast.In, ast.NotIn)
_OP_TEXT = {ast.MatMult: "'@'", ast.BitAnd: "'&'", ast.BitOr: "'|'", ast.BitXor: "'^'",
            ast.LShift: "'<<'", ast.RShift: "'>>'"}

ALLOWED_SUMMARY = (
    "formulas may use numbers, names, + - * / // % **, comparisons, and/or/not, "
    "'a if condition else b', and the functions "
)


def _allowed_text() -> str:
    return ALLOWED_SUMMARY + ", ".join(sorted(known_function_names()))


def parse(text: Any) -> Parsed:
    """Check `text` against the whitelist; return its tree and the names it uses."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise ExprError("an expression must be text or a number")
    text = str(text).strip()
    if not text:
        raise ExprError("the expression is empty")
    if len(text) > MAX_LENGTH:
        raise ExprError(f"the expression is longer than {MAX_LENGTH} characters; split it up")
    try:
        tree = ast.parse(text.replace("\n", " "), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"not a valid expression: {exc.msg} (column {exc.offset})") from None
    except (ValueError, RecursionError, MemoryError):
        raise ExprError("not a valid expression (too deeply nested or contains NUL)") from None
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise ExprError(f"the expression has more than {MAX_NODES} parts; split it up")
    names: set[str] = set()
    known = known_function_names()
    for node in nodes:
        refusal = _REFUSED.get(type(node))
        if refusal:
            raise ExprError(refusal.format(attr=getattr(node, "attr", "")) + "; "
                            + _allowed_text())
        if isinstance(node, ast.BinOp) and type(node.op) not in _BINOPS:
            raise ExprError(f"the operator {_OP_TEXT.get(type(node.op), type(node.op).__name__)}"
                            " is not allowed; " + _allowed_text())
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
            raise ExprError("the operator '~' is not allowed; write 'not' for a condition")
        if isinstance(node, ast.Compare) and any(type(op) not in _COMPARES for op in node.ops):
            raise ExprError("only < <= > >= == != (and 'in' for a choice) compare values; "
                            "'is' is not allowed")
        if isinstance(node, ast.Name):
            if node.id.startswith("_"):
                kind = "dunder names" if node.id.startswith("__") else "names starting with '_'"
                raise ExprError(f"{kind} like '{node.id}' are not allowed in formulas")
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name):
                raise ExprError("only calls to named functions are allowed; " + _allowed_text())
            if node.func.id.startswith("_"):
                raise ExprError(f"dunder names like '{node.func.id}' are not allowed in formulas")
            if node.func.id not in known:
                from .errors import did_you_mean

                raise ExprError(f"unknown function '{node.func.id}'"
                                f"{did_you_mean(node.func.id, known)}; " + _allowed_text())
            if node.keywords:
                raise ExprError("keyword arguments are not allowed")
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, (complex, bytes)) or node.value is None \
                    or node.value is Ellipsis:
                raise ExprError(f"the constant {node.value!r} is not allowed")
    for node in nodes:
        if isinstance(node, ast.Name) and not _is_call_target(node, nodes):
            names.add(node.id)
    return Parsed(text, tree.body, frozenset(names))


def _is_call_target(name: ast.Name, nodes: list[ast.AST]) -> bool:
    return any(isinstance(n, ast.Call) and n.func is name for n in nodes)


@dataclass(frozen=True)
class NameInfo:
    """What the builder needs to know of a name: its dimension and, for choices, the codes."""

    dim: Dim
    choices: Mapping[str, int] | None = None


@dataclass
class _Val:
    expr: Any
    dim: Dim | None  # None for booleans
    literal: bool = False  # a bare number: may meet 0-valued comparisons, exponents

    @property
    def is_bool(self) -> bool:
        return self.dim is None


class Builder:
    """Builds sympy objects from a `Parsed` tree, checking dimensions."""

    def __init__(self, env: Mapping[str, NameInfo], symbol: Callable[[str], Any]) -> None:
        import sympy

        self.sp = sympy
        self.env = env
        self.symbol = symbol

    def build(self, parsed: Parsed) -> tuple[Any, Dim]:
        val = self._built(parsed)
        if val.is_bool:
            # A condition used as a value: 1 when true, 0 when false.
            return self.sp.Piecewise((1, val.expr), (0, True)), DIMENSIONLESS
        return val.expr, val.dim  # type: ignore[return-value]

    def build_condition(self, parsed: Parsed) -> Any:
        return self._cond(self._built(parsed))

    def _built(self, parsed: Parsed) -> _Val:
        """The tree built, with sympy's own arithmetic failures (`x % 0`, a huge power) and
        numbers no float can hold (`1e308 * 10`, `1/0`, `exp(1000)`) refused as ExprError:
        the generated code could not compute them either."""
        try:
            val = self._node(parsed.tree)
        except ExprError:
            raise
        except ZeroDivisionError:
            raise ExprError("the formula divides by zero (a '/', '//' or '%' by 0)") from None
        except (OverflowError, ValueError, TypeError, ArithmeticError,
                RecursionError) as exc:
            raise ExprError(f"the formula cannot be computed ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}); "
                            "simplify it") from None
        _check_finite(self.sp, val.expr)
        return val

    # -- nodes --------------------------------------------------------------------------------
    def _node(self, node: ast.expr) -> _Val:
        sp = self.sp
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool):
                return _Val(sp.true if v else sp.false, None)
            if isinstance(v, str):
                raise ExprError(f"text ('{v}') is only allowed when comparing a choice input, "
                                "e.g. recompute == 'full'")
            if isinstance(v, int):
                return _Val(sp.Integer(v), DIMENSIONLESS, literal=True)
            return _Val(sp.Float(v), DIMENSIONLESS, literal=True)
        if isinstance(node, ast.Name):
            info = self.env.get(node.id)
            if info is None:
                raise ExprError(f"'{node.id}' is not defined")
            return _Val(self.symbol(node.id), info.dim)
        if isinstance(node, ast.UnaryOp):
            operand = self._node(node.operand)
            if isinstance(node.op, ast.Not):
                return _Val(sp.Not(self._cond(operand)), None)
            self._need_number(operand, "'-'")
            if isinstance(node.op, ast.USub):
                return _Val(-operand.expr, operand.dim, operand.literal)
            return operand
        if isinstance(node, ast.BinOp):
            return self._binop(node)
        if isinstance(node, ast.BoolOp):
            args = [self._cond(self._node(v)) for v in node.values]
            return _Val(sp.And(*args) if isinstance(node.op, ast.And) else sp.Or(*args), None)
        if isinstance(node, ast.Compare):
            return self._compare(node)
        if isinstance(node, ast.IfExp):
            cond = self._cond(self._node(node.test))
            a, b = self._node(node.body), self._node(node.orelse)
            dim = self._same([a, b], "the two branches of 'if ... else'")
            return _Val(sp.Piecewise((a.expr, cond), (b.expr, True)), dim)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Tuple):
            raise ExprError("tuples are only allowed as (value, condition) pairs in Piecewise")
        raise ExprError(f"'{type(node).__name__}' is not allowed; " + _allowed_text())

    def _binop(self, node: ast.BinOp) -> _Val:
        sp = self.sp
        a, b = self._node(node.left), self._node(node.right)
        op = node.op
        sym = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
               ast.Mod: "%", ast.Pow: "**"}.get(type(op))
        if sym is None:
            raise ExprError(f"the operator {type(op).__name__} is not allowed; "
                            + _allowed_text())
        self._need_number(a, f"'{sym}'")
        self._need_number(b, f"'{sym}'")
        literal = a.literal and b.literal
        if isinstance(op, (ast.Add, ast.Sub)):
            dim = self._same([a, b], f"both sides of '{sym}'")
            expr = a.expr + b.expr if isinstance(op, ast.Add) else a.expr - b.expr
            return _Val(expr, dim, literal)
        if isinstance(op, ast.Mult):
            return _Val(a.expr * b.expr, _add(a.dim, b.dim), literal)
        if isinstance(op, ast.Div):
            return _Val(a.expr / b.expr, _sub(a.dim, b.dim), literal)
        if isinstance(op, ast.FloorDiv):
            return _Val(sp.floor(a.expr / b.expr), _sub(a.dim, b.dim), literal)
        if isinstance(op, ast.Mod):
            dim = self._same([a, b], "both sides of '%'")
            return _Val(sp.Mod(a.expr, b.expr), dim, literal)
        # power
        if b.dim != DIMENSIONLESS:
            raise ExprError("an exponent must be a pure number, not "
                            + (format_dim(b.dim) if b.dim is not None else "a condition"))
        if b.literal:
            p = Fraction(str(b.expr))
            if abs(p) > MAX_EXPONENT:
                raise ExprError(f"exponents above {MAX_EXPONENT} are not allowed")
            return _Val(a.expr ** b.expr, tuple(x * p for x in a.dim), literal)  # type: ignore[union-attr]
        if a.dim != DIMENSIONLESS:
            raise ExprError("a quantity with a unit can only be raised to a fixed number")
        return _Val(a.expr ** b.expr, DIMENSIONLESS)

    def _compare(self, node: ast.Compare) -> _Val:
        sp = self.sp
        parts: list[Any] = []
        left_node = node.left
        for op, right_node in zip(node.ops, node.comparators):
            choice = self._choice_compare(left_node, op, right_node)
            if choice is not None:
                parts.append(choice)
            else:
                if isinstance(op, (ast.In, ast.NotIn, ast.Is, ast.IsNot)):
                    raise ExprError("'in' and 'is' are only allowed as "
                                    "choice_input in ('a', 'b')")
                a, b = self._node(left_node), self._node(right_node)
                self._need_number(a, "a comparison")
                self._need_number(b, "a comparison")
                self._same([a, b], "both sides of a comparison")
                rel = {ast.Lt: sp.Lt, ast.LtE: sp.Le, ast.Gt: sp.Gt, ast.GtE: sp.Ge,
                       ast.Eq: sp.Eq, ast.NotEq: sp.Ne}[type(op)]
                parts.append(rel(a.expr, b.expr))
            left_node = right_node
        return _Val(parts[0] if len(parts) == 1 else sp.And(*parts), None)

    def _choice_compare(self, left: ast.expr, op: ast.cmpop, right: ast.expr) -> Any:
        """`recompute == 'full'`, `'full' != recompute`, `schedule in ('a', 'b')`."""
        sp = self.sp
        if isinstance(left, ast.Constant) and isinstance(left.value, str):
            left, right = right, left
        strings: list[str] | None = None
        if isinstance(right, ast.Constant) and isinstance(right.value, str):
            strings = [right.value]
        elif isinstance(right, ast.Tuple) and right.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in right.elts):
            strings = [e.value for e in right.elts]  # type: ignore[attr-defined]
        if strings is None:
            return None
        if not isinstance(left, ast.Name):
            raise ExprError("text can only be compared with a choice input, "
                            "e.g. recompute == 'full'")
        info = self.env.get(left.id)
        if info is None:
            raise ExprError(f"'{left.id}' is not defined")
        if not info.choices:
            raise ExprError(f"'{left.id}' is not a choice input, so it cannot be compared "
                            "with text")
        codes = []
        for s in strings:
            if s not in info.choices:
                raise ExprError(f"'{s}' is not a choice of '{left.id}'; "
                                f"choices: {', '.join(info.choices)}")
            codes.append(info.choices[s])
        sym = self.symbol(left.id)
        if isinstance(op, ast.Eq) and len(codes) == 1:
            return sp.Eq(sym, codes[0])
        if isinstance(op, ast.NotEq) and len(codes) == 1:
            return sp.Ne(sym, codes[0])
        if isinstance(op, ast.In):
            return sp.Or(*[sp.Eq(sym, c) for c in codes])
        if isinstance(op, ast.NotIn):
            return sp.And(*[sp.Ne(sym, c) for c in codes])
        raise ExprError("choices are compared with ==, != or in (...)")

    def _call(self, node: ast.Call) -> _Val:
        name = node.func.id  # type: ignore[attr-defined]
        if name == "Piecewise":
            return self._piecewise(node)
        spec = functions().get(name)
        if spec is None:
            raise ExprError(f"unknown function '{name}'; " + _allowed_text())
        n = len(node.args)
        if n < spec.min_args or (spec.max_args is not None and n > spec.max_args):
            want = (f"{spec.min_args}" if spec.max_args == spec.min_args
                    else f"at least {spec.min_args}")
            raise ExprError(f"{name}() takes {want} argument(s), got {n}")
        args = [self._node(a) for a in node.args]
        for a in args:
            self._need_number(a, f"{name}()")
        exprs = [a.expr for a in args]
        literal = all(a.literal for a in args)
        if spec.dims == "same":
            dim = self._same(args, f"the arguments of {name}()")
        elif spec.dims == "sqrt":
            dim = tuple(x / 2 for x in args[0].dim)  # type: ignore[union-attr]
        elif spec.dims == "first":
            for a in args[1:]:
                self._dimensionless(a, name)
            dim = args[0].dim  # type: ignore[assignment]
        else:
            for a in args:
                self._dimensionless(a, name)
            dim = DIMENSIONLESS
        return _Val(spec.build(*exprs), dim, literal and name in ("Max", "Min"))

    def _piecewise(self, node: ast.Call) -> _Val:
        sp = self.sp
        pairs, vals = [], []
        for i, arg in enumerate(node.args):
            if not (isinstance(arg, ast.Tuple) and len(arg.elts) == 2):
                raise ExprError("Piecewise takes (value, condition) pairs")
            val = self._node(arg.elts[0])
            self._need_number(val, "Piecewise")
            cond_node = arg.elts[1]
            last = i == len(node.args) - 1
            if last and not (isinstance(cond_node, ast.Constant) and cond_node.value is True):
                raise ExprError("Piecewise needs a final (value, True) pair: the value when no "
                                "condition holds")
            cond = self._cond(self._node(cond_node))
            pairs.append((val.expr, cond))
            vals.append(val)
        if not pairs:
            raise ExprError("Piecewise needs at least one (value, True) pair")
        dim = self._same(vals, "the values of Piecewise")
        return _Val(sp.Piecewise(*pairs), dim)

    # -- helpers ------------------------------------------------------------------------------
    def _cond(self, val: _Val) -> Any:
        if val.is_bool:
            return val.expr
        # A number used as a condition is true when non-zero (booleans are stored as 0/1).
        return self.sp.Ne(val.expr, 0)

    @staticmethod
    def _need_number(val: _Val, where: str) -> None:
        if val.is_bool:
            raise ExprError(f"a condition cannot be used as a number in {where}; "
                            "write (1 if condition else 0)")

    @staticmethod
    def _dimensionless(val: _Val, name: str) -> None:
        if val.dim != DIMENSIONLESS:
            raise ExprError(f"{name}() needs a pure number, not {format_dim(val.dim)}")  # type: ignore[arg-type]

    @staticmethod
    def _same(vals: list[_Val], where: str) -> Dim:
        """All values share one dimension; a bare 0 fits any dimension."""
        dims = [v.dim for v in vals if not (v.literal and v.expr == 0)]
        if not dims:
            return vals[0].dim  # type: ignore[return-value]
        first = dims[0]
        for d in dims[1:]:
            if d != first:
                raise ExprError(f"unit mismatch: {where} are "
                                + " and ".join(sorted({format_dim(x) for x in dims}))  # type: ignore[arg-type]
                                + "; convert one side so the units agree")
        return first  # type: ignore[return-value]


def _check_finite(sp: Any, expr: Any) -> None:
    """Refuse an expression holding a number no float can hold, or a part without names that
    cannot be computed as a float (exp(1000), 10.0**400)."""
    import math

    bad = (sp.zoo, sp.oo, -sp.oo, sp.nan)
    stack = [expr]
    seen = 0
    while stack:
        e = stack.pop()
        seen += 1
        if seen > 20 * MAX_NODES:
            break
        if e in bad or (getattr(e, "is_Float", False) and not math.isfinite(float(e))):
            raise ExprError("the formula holds an infinite or undefined number (a division "
                            "by zero, or a figure beyond 1.8e308); fix the constant")
        if getattr(e, "is_Number", False):
            if not math.isfinite(float(e)):
                raise ExprError("the formula holds a number beyond 1.8e308; a float cannot "
                                "hold it")
            continue
        if getattr(e, "is_Boolean", False) and not getattr(e, "args", ()):
            continue
        args = getattr(e, "args", ())
        if args and not getattr(e, "free_symbols", True) and getattr(e, "is_Function", False) \
                or getattr(e, "is_Pow", False) and not getattr(e, "free_symbols", True):
            try:
                value = complex(e.evalf(30))
            except (TypeError, ValueError, OverflowError, ArithmeticError):
                value = None
            if value is not None and not (math.isfinite(value.real)
                                          and math.isfinite(value.imag)):
                raise ExprError(f"'{e}' is beyond what a float can hold (1.8e308); fix the "
                                "constant")
            continue
        stack.extend(a for a in args if hasattr(a, "args"))


def _add(a: Dim | None, b: Dim | None) -> Dim:
    return tuple(x + y for x, y in zip(a, b))  # type: ignore[arg-type]


def _sub(a: Dim | None, b: Dim | None) -> Dim:
    return tuple(x - y for x, y in zip(a, b))  # type: ignore[arg-type]
