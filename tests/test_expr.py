"""The formula language: what it accepts, what it refuses, and that nothing in it runs."""

from __future__ import annotations

import builtins

import pytest
import sympy

from dlformula.expr import Builder, ExprError, NameInfo, parse
from dlformula.units import DIMENSIONLESS, parse_unit

BYTE = parse_unit("byte").dim
SEC = parse_unit("s").dim


def build(text, env=None):
    env = env or {"a": NameInfo(DIMENSIONLESS), "b": NameInfo(DIMENSIONLESS),
                  "mem": NameInfo(BYTE), "t": NameInfo(SEC),
                  "recompute": NameInfo(DIMENSIONLESS, {"none": 0, "selective": 1, "full": 2})}
    return Builder(env, sympy.Symbol).build(parse(text))


REFUSED = [
    ("__import__('os').system('touch /tmp/dlformula-pwned')", "only calls to named functions"),
    ("__import__('os')", "dunder names like '__import__' are not allowed"),
    ("a.real", "attribute access ('.real') is not allowed"),
    ("a[0]", "subscripts ('x[...]') are not allowed"),
    ("(lambda: 1)()", "only calls to named functions"),
    ("lambda: 1", "lambda is not allowed"),
    ("[x for x in a]", "comprehensions are not allowed"),
    ("Max(x for x in a)", "comprehensions are not allowed"),
    ("{x: 1 for x in a}", "comprehensions are not allowed"),
    ("__class__", "dunder names like '__class__' are not allowed"),
    ("_private", "names starting with '_' like '_private' are not allowed"),
    ("eval('1')", "unknown function 'eval'"),
    ("open('/etc/passwd')", "unknown function 'open'"),
    ("Max(a, key=b)", "keyword arguments are not allowed"),
    ("(y := 3)", "assignment (':=') is not allowed"),
    ("f'{a}'", "f-strings are not allowed"),
    ("a if", "not a valid expression"),
    ("", "the expression is empty"),
    ("2 ** 1000", "exponents above 64 are not allowed"),
]


@pytest.mark.parametrize("text,message", REFUSED)
def test_refused(text, message):
    with pytest.raises(ExprError) as err:
        build(text)
    assert message in str(err.value)


def test_nothing_runs(tmp_path, monkeypatch):
    """Loading every formula never hands formula text to eval, exec, sympify or parse_expr."""
    seen: list[str] = []

    def spy(real):
        def wrapper(*args, **kwargs):
            if args and isinstance(args[0], str):
                seen.append(args[0])
            return real(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(builtins, "eval", spy(builtins.eval))
    monkeypatch.setattr(builtins, "exec", spy(builtins.exec))
    monkeypatch.setattr(sympy, "sympify", spy(sympy.sympify))
    monkeypatch.setattr(sympy, "parse_expr", spy(sympy.parse_expr))
    from dlformula.loader import load_formula_set
    from dlformula.resources import builtin_folders, formula_sources

    fs = load_formula_set(formula_sources(builtin_folders()))
    texts = [" ".join(q.expr.split()) for q in fs.quantities.values()]
    assert len(texts) > 100
    leaked = [t for t in texts if any(t in s for s in seen)]
    assert leaked == []
    with pytest.raises(ExprError):
        build("__import__('os').system('touch %s')" % (tmp_path / "pwned"))
    assert not (tmp_path / "pwned").exists()
    assert not any("pwned" in s for s in seen)


def test_arithmetic_and_functions():
    e, dim = build("Max(a, b) + ceiling(a / b) - floor(a // b) + a % b + sqrt(a) + log(b)")
    assert dim == DIMENSIONLESS
    assert e.subs({"a": 9, "b": 2}) == 9 + 5 - 4 + 1 + 3 + sympy.log(2)


def test_if_else_and_choices():
    e, _ = build("a if recompute == 'full' else b")
    assert e.subs({"recompute": 2, "a": 1, "b": 0}) == 1
    assert e.subs({"recompute": 1, "a": 1, "b": 0}) == 0
    e, _ = build("a if recompute in ('none', 'selective') else b")
    assert e.subs({"recompute": 0, "a": 1, "b": 0}) == 1
    with pytest.raises(ExprError, match="'sometimes' is not a choice of 'recompute'"):
        build("a if recompute == 'sometimes' else b")
    with pytest.raises(ExprError, match="'a' is not a choice input"):
        build("b if a == 'x' else 0")


def test_piecewise_needs_default():
    e, _ = build("Piecewise((a, b > 1), (0, True))")
    assert e.subs({"a": 5, "b": 2}) == 5
    with pytest.raises(ExprError, match="final \\(value, True\\) pair"):
        build("Piecewise((a, b > 1))")


@pytest.mark.parametrize("text,message", [
    ("mem + t", "unit mismatch: both sides of '+' are byte and s"),
    ("Max(mem, t)", "unit mismatch: the arguments of Max() are byte and s"),
    ("mem + 1", "unit mismatch: both sides of '+' are 1 and byte"),
    ("log(mem)", "log() needs a pure number, not byte"),
    ("a ** mem", "an exponent must be a pure number, not byte"),
    ("mem if a > t else t", "unit mismatch"),
])
def test_unit_checks(text, message):
    with pytest.raises(ExprError) as err:
        build(text)
    assert message in str(err.value)


def test_units_combine():
    _, dim = build("mem / t")
    assert dim == parse_unit("GB/s").dim
    _, dim = build("sqrt(mem * mem)")
    assert dim == BYTE
    _, dim = build("Max(mem, 0)")  # a bare zero fits any unit
    assert dim == BYTE
