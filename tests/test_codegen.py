"""Generated code against sympy's own substitution, and the NumPy path against the scalar one."""

from __future__ import annotations

import math

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


def sympy_values(fs, values):
    """Each quantity from its own expression, dependencies substituted as numbers."""
    known = {sympy.Symbol(n): sympy.Float(v, 30) if isinstance(v, float) else sympy.Integer(v)
             for n, v in values.items()}
    for n, c in fs.constants.items():
        known[sympy.Symbol(n)] = sympy.Float(c.value, 30)
    out = {}
    for name in fs.order:
        expr = fs.exprs[name]
        v = expr.xreplace({s: known[s] for s in expr.free_symbols})
        v = sympy.N(v, 30)
        known[sympy.Symbol(name)] = v
        out[name] = v
    return out


def close(a, b):
    a, b = float(a), float(b)
    if math.isinf(a) or math.isinf(b) or math.isnan(a) or math.isnan(b):
        return (math.isinf(a) and math.isinf(b)) or (math.isnan(a) and math.isnan(b))
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


EVALUATED: list[int] = []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_code_matches_sympy(engine, base, data):
    model, fs = engine.model, engine.formula_set
    values = data.draw(inputs(model, base))
    got = model.evaluate(values)
    want = sympy_values(fs, values)
    EVALUATED.append(1)
    bad = [n for n in fs.order if not close(got[n], want[n])]
    assert bad == [], {n: (got[n], want[n]) for n in bad[:5]}


def test_property_test_really_ran():
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
