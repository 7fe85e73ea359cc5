"""Code generation: one Python function computing every quantity in dependency order.

The text uses only arithmetic and the `_`-prefixed helpers of `runtime.py`, so it runs on plain
numbers (one config) or on NumPy arrays (many configs at once) depending on which namespace it is
executed in. The printer accepts exactly the sympy node types the formula language can build and
refuses anything else, so a surprise never turns into wrong code.

The code is printed into a hash-consed DAG first (`_Code`), so a subexpression written in many
formulas is computed once per function (`_Body`), and a condition that is one value for every
config (a choice or a scalar not swept) computes only the branch it takes. Neither changes a
number: shared code is the very same text, computed once. (On arrays, a quantity that only a
branch not taken would have made an array stays one number; NumPy's array and scalar kernels
for `**`, log and exp may differ in the last bit. Arithmetic, Min/Max and rounding do not.)
"""

from __future__ import annotations

from typing import Any

import sympy
from sympy.core.function import AppliedUndef

from .loader import FormulaSet


class CodegenError(ValueError):
    pass


class _Code:
    """Expression code as a hash-consed DAG. A node is a tuple of literal text and child node
    ids; equal tuples are one node, so a subexpression written twice anywhere in the model is
    one node. A node's text depends on its parts alone, so computing it once and reusing the
    value changes no result, not even in the last bit (unlike sympy's `cse`, which regroups
    products and turns `a/b` into `a*(1/b)`)."""

    def __init__(self) -> None:
        self.parts: list[tuple[str | int, ...]] = []
        self.children: list[tuple[int, ...]] = []  # empty for a leaf (a name or a number)
        self._ids: dict[tuple[str | int, ...], int] = {}

    def node(self, *parts: str | int) -> int:
        i = self._ids.get(parts)
        if i is None:
            i = self._ids[parts] = len(self.parts)
            self.parts.append(parts)
            self.children.append(tuple(p for p in parts if isinstance(p, int)))
        return i

    def call(self, head: str, args: list[int]) -> int:
        """`head(a, b, ...)`."""
        parts: list[str | int] = [head + "("]
        for k, a in enumerate(args):
            parts.extend((", ", a) if k else (a,))
        parts.append(")")
        return self.node(*parts)

    def joined(self, ids: list[int], op: str) -> int:
        """`(a op b op ...)`, or `a` alone."""
        if len(ids) == 1:
            return ids[0]
        parts: list[str | int] = ["("]
        for k, a in enumerate(ids):
            parts.extend((op, a) if k else (a,))
        parts.append(")")
        return self.node(*parts)


class _Printer:
    def __init__(self, functions: dict[str, str], shared: bool = True) -> None:
        self.functions = functions  # sympy function name -> runtime helper name
        self.shared = shared  # False: the plain code tests compare against
        self.code = _Code()

    def p(self, e: Any) -> int:
        """The code node of a sympy expression."""
        code = self.code
        if e is sympy.true:
            return code.node("True")
        if e is sympy.false:
            return code.node("False")
        if isinstance(e, sympy.Symbol):
            return code.node(e.name)
        if isinstance(e, sympy.Integer):
            return code.node(str(int(e)))
        if isinstance(e, sympy.Rational):
            return code.node(f"({e.p}/{e.q})")
        if isinstance(e, sympy.Float):
            return code.node(repr(float(e)))
        if e in (sympy.zoo, sympy.oo, -sympy.oo, sympy.nan):
            raise CodegenError("the formula divides by zero or is infinite")
        if isinstance(e, sympy.Add):
            return self._add(e.args)
        if isinstance(e, sympy.Mul):
            return self._mul(e.args)
        if isinstance(e, sympy.Pow):
            base, exp = e.args
            if exp.is_Number and exp < 0:
                return code.node("_div(1, ", self.p(base ** (-exp)), ")")
            if exp.is_Rational and not exp.is_Integer:
                return code.node("(", self.p(base), f"**{float(exp)!r})")
            return code.node("(", self.p(base), "**", self.p(exp), ")")
        if isinstance(e, sympy.Piecewise):
            return self._piecewise(list(e.args))
        if isinstance(e, sympy.core.relational.Relational):
            op = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "==", "!=": "!="}[e.rel_op]
            return code.node("(", self.p(e.lhs), f" {op} ", self.p(e.rhs), ")")
        if isinstance(e, sympy.And):
            return code.call("_and", [self.p(a) for a in e.args])
        if isinstance(e, sympy.Or):
            return code.call("_or", [self.p(a) for a in e.args])
        if isinstance(e, sympy.Not):
            return code.call("_not", [self.p(e.args[0])])
        name = type(e).__name__ if not isinstance(e, AppliedUndef) else str(e.func)
        helper = self.functions.get(name)
        if helper:
            return code.call(helper, [self.p(a) for a in e.args])
        raise CodegenError(f"cannot generate code for {name}")

    def _add(self, terms: tuple[Any, ...]) -> int:
        # `a - b*c` rather than `a + (-1*b*c)`, and `b - a` rather than `-1*a + b`: an operation
        # fewer each, and the same number to the last bit (IEEE negation is exact, `(-x)*y` is
        # `-(x*y)`, `a + (-b)` is `a - b`, and addition commutes).
        if not self.shared:
            return self.code.joined([self.p(t) for t in terms], " + ")
        first, *rest = terms
        if _negative(first) and not _negative(rest[0]):
            first, rest[0] = rest[0], first
        parts: list[str | int] = ["(", self.p(first)]
        for t in rest:
            if _negative(t):
                coeff = -t.args[0]
                factors = t.args[1:] if coeff is sympy.S.One else (coeff, *t.args[1:])
                parts += [" - ", self._mul(factors)]
            else:
                parts += [" + ", self.p(t)]
        return self.code.node(*parts, ")")

    def _mul(self, factors: tuple[Any, ...]) -> int:
        code = self.code
        num, den = [], []
        for f in factors:
            if isinstance(f, sympy.Pow) and f.args[1].is_Rational and f.args[1] < 0:
                den.append(self.p(f.args[0] ** (-f.args[1])))
            elif isinstance(f, sympy.Rational) and not isinstance(f, sympy.Integer):
                if f.p != 1:
                    num.append(code.node(str(f.p)))
                den.append(code.node(str(f.q)))
            else:
                num.append(self.p(f))
        top = code.joined(num, "*") if num else code.node("1")
        if not den:
            return top
        # Every division goes through _div: both branches of a condition over arrays are
        # computed, so a branch not taken may divide by zero harmlessly.
        return code.node("_div(", top, ", ", code.joined(den, "*"), ")")

    def _piecewise(self, pairs: list[Any]) -> int:
        (value, cond), rest = pairs[0], pairs[1:]
        if cond is sympy.true or not rest:
            return self.p(value)
        return self.code.call("_where", [self.p(cond), self.p(value), self._piecewise(rest)])


def _negative(term: Any) -> bool:
    """A product with a negative number in front (`-2*x`)."""
    return isinstance(term, sympy.Mul) and term.args[0].is_Number and term.args[0] < 0


class _Body:
    """The lines of one generated function. A subexpression used more than once in it is
    computed once, into a local `_tN` (or the quantity it is all of) just before its first use;
    the line is credited to the quantity that first needs it (for error messages)."""

    def __init__(self, code: _Code, roots: list[int], shared: bool = True,
                 lazy: bool = True) -> None:
        self.code = code
        self.lazy = lazy
        self.uses: dict[int, int] = {}
        for root in roots if shared else ():
            stack = [root]
            while stack:
                i = stack.pop()
                if code.children[i]:
                    n = self.uses[i] = self.uses.get(i, 0) + 1
                    if n == 1:  # inside a repeat, the parts are counted once (computed once)
                        stack.extend(code.children[i])
        self.names: dict[int, str] = {}
        self.lines: list[tuple[str, str | None]] = []  # (line, the quantity it is for)

    def text(self, i: int, owner: str | None) -> str:
        name = self.names.get(i)
        if name is not None:
            return name
        text = self._render(i, owner)
        if self.uses.get(i, 0) > 1:
            name = self.names[i] = f"_t{len(self.names)}"
            self.lines.append((f"    {name} = {text}", owner))
            return name
        return text

    def assign(self, name: str, i: int) -> None:
        if i in self.names:
            text = self.names[i]
        else:
            text = self._render(i, name)
            if self.uses.get(i, 0) > 1:
                self.names[i] = name  # later uses read the quantity
        self.lines.append((f"    {name} = {text}", name))

    def _render(self, i: int, owner: str | None) -> str:
        parts = self.code.parts[i]
        if parts[0] == "_where(" and self.lazy:
            # A condition that is one value (a scalar, or a choice not swept) picks its branch
            # before the other is computed; an array of conditions takes NumPy's elementwise
            # `where` of both.
            cond, yes, no = (self.text(c, owner) for c in self.code.children[i])
            if not self.code.children[self.code.children[i][0]]:
                test = var = cond  # a name or a constant
            else:
                var = f"_c{i}"
                test = f"{var} := {cond}"
            return f"(_where({var}, {yes}, {no}) if _many({test}) else {yes} if {var} else {no})"
        return "".join(p if isinstance(p, str) else self.text(p, owner) for p in parts)

    def add(self, line: str) -> None:
        self.lines.append((line, None))


def generate(fs: FormulaSet, shared: bool = True, lazy: bool = True
             ) -> tuple[str, dict[int, str]]:
    """Source text of `evaluate(_in)`, `constraints(_in)` and `warnings(_v)`, and line ->
    quantity name. The plain code tests hold it to: `shared=False` prints every formula whole,
    `lazy=False` computes both branches of every condition."""
    from .expr import runtime_names

    printer = _Printer(runtime_names(), shared)
    roots = {}
    for name in fs.order:
        try:
            roots[name] = printer.p(fs.exprs[name])
        except CodegenError as exc:
            q = fs.quantities[name]
            from .errors import ModelError

            raise ModelError(f"quantity '{name}': {exc}", q.path, q.line) from None
    lines = [f"# Generated by dlformula from formula digest {fs.digest[:16]}; do not edit.",
             "def evaluate(_in):"]
    for name in fs.inputs:
        lines.append(f"    {name} = _in[{name!r}]")
    for name, c in fs.constants.items():
        lines.append(f"    {name} = {float(c.value)!r}")
    body = _Body(printer.code, list(roots.values()), shared, lazy)
    for name in fs.order:
        body.assign(name, roots[name])
    line_of: dict[int, str] = {}
    for line, owner in body.lines:
        lines.append(line)
        if owner:
            line_of[len(lines)] = owner
    names = [*fs.inputs, *fs.constants, *fs.order]
    lines.append("    return {" + ", ".join(f"{n!r}: {n}" for n in names) + "}")
    lines.append("")
    # Constraints take the inputs and compute only the quantities they need, so a layout that
    # cannot run is reported before anything that would divide by its zeros is evaluated.
    checks = [c for d, c in zip(fs.constraints, fs.conditions) if d.kind == "constraint"]
    warns = [c for d, c in zip(fs.constraints, fs.conditions) if d.kind == "warning"]
    lines.append("def constraints(_in):")
    needed = _closure({s.name for c in checks for s in c.free_symbols}, fs.deps)
    for n in sorted(needed & set(fs.inputs)):
        lines.append(f"    {n} = _in[{n!r}]")
    for n in sorted(needed & set(fs.constants)):
        lines.append(f"    {n} = {float(fs.constants[n].value)!r}")
    lines.extend(_function_tail(printer, [(n, roots[n]) for n in fs.order if n in needed],
                                checks, lazy))
    lines.append("")
    # Warnings look at evaluated values (any quantity), after a layout has been accepted.
    lines.append("def warnings(_v):")
    for n in sorted({s.name for c in warns for s in c.free_symbols}):
        lines.append(f"    {n} = _v[{n!r}]")
    lines.extend(_function_tail(printer, [], warns, lazy))
    return "\n".join(lines) + "\n", line_of


def _function_tail(printer: _Printer, assigned: list[tuple[str, int]], results: list[Any],
                   lazy: bool) -> list[str]:
    """Lines assigning `assigned` (name, code node) and returning the list of `results`."""
    returned = [printer.p(c) for c in results]
    body = _Body(printer.code, [i for _, i in assigned] + returned, printer.shared, lazy)
    for name, i in assigned:
        body.assign(name, i)
    texts = [body.text(i, None) for i in returned]
    body.add("    return [" + ", ".join(texts) + "]")
    return [line for line, _ in body.lines]


def _closure(names: set[str], deps: dict[str, list[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(names)
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(deps.get(n, ()))
    return seen
