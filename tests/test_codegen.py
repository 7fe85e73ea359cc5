"""Generated code against sympy's own substitution, and the NumPy path against the scalar one."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import EXAMPLES


@pytest.fixture(scope="module")
def base(engine):
    return engine.config(str(EXAMPLES / "gpt3-175b.yaml")).values


def random_inputs(draw, model, base):
    """Any values inside each input's domain (layout constraints deliberately ignored)."""
    values = {}
    for name, d in model.inputs.items():
        if d.choices:
            values[name] = draw(st.sampled_from([c for _, c in d.choices]))
        elif d.domain.kind == "boolean":
            values[name] = draw(st.sampled_from([0, 1]))
        elif d.domain.kind == "integer":
            lo = int(d.domain.lo if d.domain.lo is not None else 0)
            hi = int(d.domain.hi) if d.domain.hi is not None else max(lo + 1, 2 * int(base[name]))
            values[name] = draw(st.integers(min_value=max(lo, 1) if lo >= 0 and name not in (
                "head_dim", "max_position", "zero") else lo, max_value=max(hi, lo + 1)))
        else:
            lo = d.domain.lo if d.domain.lo is not None else 0.0
            hi = d.domain.hi if d.domain.hi is not None else max(2 * base[name], 1.0)
            # Realistic magnitudes: zero where the domain allows it, else within 1000x of the top
            # (denormal bandwidths would only test float overflow, in both paths alike).
            choices = st.floats(min_value=max(lo, hi * 1e-3), max_value=hi, allow_nan=False)
            # (a zero peak is a node without that precision: a constraint rejects it first)
            if lo == 0 and d.domain.lo_inclusive and not name.startswith("peak_flops"):
                choices = st.one_of(st.just(0.0), choices)
            values[name] = draw(choices)
    return values


@st.composite
def inputs(draw, model, base):
    return random_inputs(draw, model, base)


def _known(fs, values):
    """Symbol -> number for the inputs and constants, at 30 digits."""
    known = {sympy.Symbol(n): sympy.Float(v, 30) if isinstance(v, float) else sympy.Integer(v)
             for n, v in values.items()}
    for n, c in fs.constants.items():
        known[sympy.Symbol(n)] = sympy.Float(c.value, 30)
    return known


def sympy_values(fs, values):
    """Each quantity from its own expression, dependencies substituted as numbers."""
    known = _known(fs, values)
    out = {}
    for name in fs.order:
        expr = fs.exprs[name]
        v = expr.xreplace({s: known[s] for s in expr.free_symbols})
        v = sympy.N(v, 30)
        known[sympy.Symbol(name)] = v
        out[name] = v
    return out


def close(a, b, scale=0.0):
    """Equal to 1e-9 of the value, or of `scale`: the size of the numbers it was computed from
    (`magnitude`), which float rounding is relative to."""
    a, b = float(a), float(b)
    if math.isinf(a) or math.isinf(b) or math.isnan(a) or math.isnan(b):
        return (math.isinf(a) and math.isinf(b)) or (math.isnan(a) and math.isnan(b))
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=max(1e-12, 1e-9 * abs(float(scale))))


def _magnitude_expr(e):
    """`e` with every sum replaced by the sum of its terms' magnitudes (and products, positive
    powers, Max/Min/rounding and branches followed down to them): the size of the numbers a
    float computation of `e` adds and subtracts. `a - b` with a close to b is tiny, while its
    rounding error is relative to a and b; this is a + b."""
    from sympy.logic.boolalg import BooleanAtom, BooleanFunction

    if isinstance(e, (BooleanAtom, BooleanFunction, sympy.core.relational.Relational)):
        return sympy.Integer(0)  # a condition, not a number (a Symbol is a Boolean too)
    if e.is_Atom:
        return sympy.Abs(e)
    if isinstance(e, (sympy.Add, sympy.Mul)):
        return e.func(*[_magnitude_expr(a) for a in e.args])
    if isinstance(e, sympy.Pow) and e.exp.is_Number and e.exp > 0:
        return _magnitude_expr(e.base) ** e.exp
    if isinstance(e, sympy.Piecewise):
        return sympy.Piecewise(*[(_magnitude_expr(v), c) for v, c in e.args])
    if isinstance(e, (sympy.Max, sympy.Min, sympy.Abs, sympy.ceiling, sympy.floor, sympy.Mod)):
        return sympy.Max(*[_magnitude_expr(a) for a in e.args])
    return sympy.Abs(e)


def magnitude(fs, name, values, want):
    """The size of the numbers quantity `name` is computed from, for these inputs (`want`:
    every quantity's exact value): its dependencies are taken at their own size, since their
    rounding errors are relative to themselves."""
    known = _known(fs, values)
    known.update({sympy.Symbol(n): v for n, v in want.items()})
    expr = _magnitude_expr(fs.exprs[name])
    return sympy.N(expr.xreplace({s: known[s] for s in expr.free_symbols}), 30)


def mismatches(fs, got, want, values):
    """Quantities the generated code computes differently from sympy, beyond float rounding of
    the numbers each is computed from."""
    return [n for n in fs.order if not close(got[n], want[n])
            and not close(got[n], want[n], magnitude(fs, n, values, want))]


EVALUATED: list[int] = []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_code_matches_sympy(engine, base, data):
    model, fs = engine.model, engine.formula_set
    values = data.draw(inputs(model, base))
    got = model.evaluate(values)
    want = sympy_values(fs, values)
    EVALUATED.append(1)
    bad = mismatches(fs, got, want, values)
    assert bad == [], {n: (got[n], want[n]) for n in bad[:5]}


def test_a_difference_of_near_equal_numbers_is_compared_at_their_size(engine, base):
    """`memory_headroom = hbm_capacity - memory_per_gpu` with the two within a few KiB: float64
    gets it to ~1e-5 byte, which is 1e-8 of the headroom, and a relative tolerance of 1e-9 made
    the property test above fail now and then. The tolerance (1e-9, as for every quantity) is
    relative to the numbers subtracted; a wrong term is still caught."""
    model, fs = engine.model, engine.formula_set
    values = dict(base)
    values["hbm_capacity"] = model.evaluate(values)["memory_per_gpu"] + 1000.0
    got, want = model.evaluate(values), sympy_values(fs, values)
    assert not close(got["memory_headroom"], want["memory_headroom"])  # the old comparison
    assert mismatches(fs, got, want, values) == []
    got["memory_headroom"] += 1024.0  # a KiB off: more than 1e-9 of the ~80 GB subtracted
    assert mismatches(fs, got, want, values) == ["memory_headroom"]


def test_property_test_really_ran():
    # Under pytest-xdist the property test may have run in another worker (see test_codegen_cse).
    if os.environ.get("PYTEST_XDIST_WORKER") and not EVALUATED:
        pytest.skip("the property test ran in another xdist worker")
    assert len(EVALUATED) >= 20


def test_numpy_path_matches_scalar(engine, base):
    model = engine.model
    rng = np.random.default_rng(0)
    n = 64
    arrays = {k: np.full(n, float(v)) for k, v in base.items()}
    arrays["micro_batch"] = rng.integers(1, 4, n).astype(float)
    arrays["tp"] = rng.choice([1.0, 2.0, 4.0, 8.0], n)
    arrays["recompute"] = rng.integers(0, 3, n).astype(float)
    arrays["zero"] = rng.integers(0, 4, n).astype(float)
    arrays["sp"] = rng.integers(0, 2, n).astype(float)
    evaluate, constraints = model.functions(vectorized=True)
    vec = evaluate(arrays)
    for i in range(0, n, 7):
        one = model.evaluate({k: v[i] for k, v in arrays.items()})
        for name in model.order:
            assert close(np.broadcast_to(vec[name], (n,))[i], one[name]), name
    checks = constraints(arrays)
    assert len(checks) == len(model.constraints)


def test_pruned_evaluator(engine, base):
    evaluate, _ = engine.model.functions(only=["step_time"])
    full = engine.model.evaluate(base)
    assert evaluate(base) == {"step_time": full["step_time"]}


@settings(max_examples=40, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), dp=st.sampled_from([1, 2, 4, 8, 16]),
       cp=st.sampled_from([1, 2, 4]), zero=st.integers(0, 3), pp=st.sampled_from([1, 2, 4, 8]),
       recompute=st.integers(0, 2), sp=st.integers(0, 1), mb=st.sampled_from([1, 2, 4]),
       dim=st.sampled_from(["tp", "dp", "cp"]))
def test_memory_never_rises_with_a_sharding_degree(engine, base, tp, dp, cp, zero, pp, recompute,
                                                   sp, mb, dim):
    """Doubling tp, dp or cp (all else fixed) never increases the memory one GPU needs."""
    values = dict(base, tp=tp, dp=dp, cp=cp, zero=zero, pp=pp, recompute=recompute, sp=sp,
                  micro_batch=mb, vpp=1)
    before = engine.model.evaluate(values)["memory_per_gpu"]
    values[dim] *= 2
    after = engine.model.evaluate(values)["memory_per_gpu"]
    assert after <= before * (1 + 1e-12)


def test_scalar_code_divides_in_c_and_falls_back_to_inf_on_a_zero_divisor():
    """The scalar flavour binds `_div` to C division (no Python frame per division, see
    runtime.scalar_namespace); a zero divisor reruns the safe flavour, which gives inf or nan
    as before."""
    import math
    import operator

    from dlformula.model import _fast_or_safe
    from dlformula.runtime import scalar_namespace

    text = "def evaluate(_in):\n    return _div(_in['a'], _in['b']) if not _many(_in['a']) else 0\n"
    fast, safe = scalar_namespace(fast=True), scalar_namespace()
    exec(text, fast)
    exec(text, safe)
    assert fast["_div"] is operator.truediv and fast["_many"] is callable
    run = _fast_or_safe(fast["evaluate"], safe["evaluate"])
    assert run({"a": 3.0, "b": 2.0}) == 1.5
    assert run({"a": 3.0, "b": 0.0}) == math.inf and run({"a": -1, "b": 0}) == -math.inf
    assert math.isnan(run({"a": 0.0, "b": 0.0}))
