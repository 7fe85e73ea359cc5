"""bench/residuals.py: the held-out errors are binned by a model quantity as written.

The bins decide which mechanism a trend points at, so they are checked on hand-made values:
each run lands in the one [lo, hi) bin its value lies in, empty bins are left out, and the
signed and absolute medians are those computed by hand; a derived share divides the two
quantities it names.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import load_script

BENCH = Path(__file__).resolve().parent.parent / "bench" / "residuals.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(BENCH)


def test_runs_fall_in_the_bin_of_their_value(bench):
    values = [0.0, 0.01, 0.15, 0.19, 0.5]
    errors = [0.10, -0.30, -0.05, 0.20, 0.02]
    out = bench.bins(values, errors, [0, 0.1, 0.2, 0.3, 1.0])
    assert [(b["lo"], b["n"]) for b in out] == [(0, 2), (0.1, 2), (0.3, 1)]  # [0.2, 0.3) empty
    first, second, last = out
    assert first["signed"] == pytest.approx(-0.10) and first["abs"] == pytest.approx(0.20)
    assert second["signed"] == pytest.approx(0.075) and second["abs"] == pytest.approx(0.125)
    assert last["signed"] == pytest.approx(0.02)
    # a value on an edge belongs to the bin it opens, and one past the last edge to none
    assert bench.bins([0.1, 2.0], [1.0, 1.0], [0, 0.1, 1.0])[0]["lo"] == 0.1
    assert sum(b["n"] for b in bench.bins([0.1, 2.0], [1.0, 1.0], [0, 0.1, 1.0])) == 1


def test_attention_share_divides_the_named_times(bench):
    result = {"attention_core_time": 0.002, "layer_forward_time": 0.008, "mfu": 0.4}
    assert bench.quantity(result, "attention_share") == pytest.approx(0.25)
    assert bench.quantity(result, "mfu") == pytest.approx(0.4)


def test_unknown_quantity_is_one_line(bench, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--show", "bubble"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "not a binned quantity" in err[-1] and "pipeline_bubble_fraction" in err[-1]


def test_within_divides_out_each_sources_bias_and_drops_small_sources(bench):
    def row(i, source, err):
        return {"id": f"r{i}", "file": "f.yaml", "source": source, "held_out": err, "values": {}}
    # source a: errors +10%, +21%, +33.1% (ratios 1.1, 1.21, 1.331): bias 1.21, so the
    # within-source errors are 1.1 / 1.21 - 1, 0 and 1.331 / 1.21 - 1 = +10%;
    # source b has two runs and is left out (no scatter to speak of)
    rows = [row(0, "a", 0.10), row(1, "a", 0.21), row(2, "a", 0.331),
            row(3, "b", -0.5), row(4, "b", 0.5)]
    out = bench.within_source(rows)
    assert [r["id"] for r in out] == ["r0", "r1", "r2"]
    assert [r["held_out"] for r in out] == pytest.approx([1.1 / 1.21 - 1, 0.0, 0.1])
    assert rows[0]["held_out"] == 0.10  # the input rows are not changed


def test_moe_quantities_leave_dense_runs_out(bench):
    moe = {"experts": 128, "ep_domains": 4.0, "ep_comm_time": 0.3, "step_time": 1.5}
    dense = {"experts": 0, "ep_domains": 1.0, "ep_comm_time": 0.0, "step_time": 1.0}
    assert bench.quantity(moe, "ep_domains") == 4.0
    assert bench.quantity(moe, "ep_comm_share") == pytest.approx(0.2)
    assert bench.quantity(dense, "ep_domains") is None
    assert bench.quantity(dense, "ep_comm_share") is None
    # a run without a value is in no bin: the dense run's error does not reach the MoE bins
    out = bench.bins([4.0, None], [-0.3, 0.9], bench.BINS["ep_domains"])
    assert [(b["lo"], b["n"], b["signed"]) for b in out] == [(3, 1, -0.3)]
