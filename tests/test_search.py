"""`dlformula search` and `search(...)`: the layout space, its constraints, ranking, Pareto."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest

from conftest import EXAMPLES
from dlformula.search import divisors, pareto_front, search
from dlformula.search_rank import AUTO_TWINS
from dlformula.table import Table

LLAMA = str(EXAMPLES / "llama3-70b.yaml")
SEED = ["training.seq_len=4096", "training.global_batch=1024"]  # 004's 70B / 64-GPU example


@pytest.fixture(autouse=True, scope="module")
def commands():
    from dlformula.cli import cli
    from dlformula.cli_sweep import COMMANDS

    for command in COMMANDS:
        if command.name not in cli.commands:
            cli.add_command(command)


@pytest.fixture(scope="module")
def seed(engine):
    return search(LLAMA, gpus=64, sets=SEED, engine=engine,
                  pareto="step_time,memory_per_gpu")


def test_divisors():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(1) == [1]
    assert len(divisors(16384)) == 15


def layout_sets(engine, result, row):
    """--set items that give one row's layout to `engine.config`."""
    model = engine.model
    def text(v):
        return str(v).lower() if isinstance(v, bool) else str(v)

    return [f"{model.inputs[k].config}={text(row[k])}" for k in result.layout]


def test_every_layout_runs_fits_and_is_ranked(engine, seed):
    assert len(seed) > 100
    model = engine.model
    assert np.all(np.diff(seed["step_time"]) >= 0)
    assert np.all(seed["memory_per_gpu"] <= seed["hbm_capacity"])
    assert np.all(seed["tp"] * seed["pp"] * seed["cp"] * seed["dp"] == 64)
    for row in seed.head(20).rows():
        sets = SEED + layout_sets(engine, seed, row) + ["hardware.gpus=64"]
        cfg = engine.config(LLAMA, sets, check_layout=False)
        assert all(model.check(cfg.values))
        one = model.evaluate(cfg.values)
        assert row["step_time"] == pytest.approx(one["step_time"], rel=1e-12)


def test_counts_add_up(seed):
    s = seed.stats
    assert s.axes["vpp"] == 10 and s.axes["micro_batch"] == 11  # divisors of 80 and 1024
    assert s.total == s.factorisations * int(np.prod(list(s.axes.values())))
    twins = s.extra.get(AUTO_TWINS, 0)
    assert twins > 0  # auto equal to none, selective or full, left out of the ranks
    assert s.invalid + s.extra["do not fit in memory"] + twins + s.kept == s.total
    assert s.kept == len(seed)
    # tp x pp x cp x dp = 64 has 84 factorisations and ep 7 candidates before pruning
    before = {name: p.before for name, p in s.pruned.items()}
    assert s.space == 84 * 7 * int(np.prod([n for k, n in s.axes.items() if k != "ep"]))
    assert before["ep"] == 7


def test_axes_that_cannot_apply_are_pruned_before_counting(seed):
    """A dense model has no experts to split: ep is 1, and the layouts other ep values would
    have made are neither enumerated nor counted as considered."""
    s = seed.stats
    assert s.candidates["ep"] == [1.0] and s.pruned["ep"].reasons == ["ep_needs_experts"]
    assert set(seed["ep"].tolist()) == {1}
    assert s.total < s.space
    assert "considered, of" in s.summary() and "ep 7 -> 1 (ep_needs_experts)" in s.summary()


def test_early_filtering_keeps_exactly_the_valid_layouts(engine):
    """Pruning, then the axis-by-axis join with early constraint checks, equals the
    brute-force product of every candidate of every axis."""
    from dlformula.search import _candidates, search_axes
    from dlformula.sweep import input_by_key

    result = search(LLAMA, gpus=32, sets=SEED, engine=engine)
    model = engine.model
    _, check = model.functions(vectorized=True)
    base = engine.config(LLAMA, SEED + ["hardware.gpus=32"], check_layout=False).values
    by_key = input_by_key(model)
    full = {by_key[k].name: _candidates(by_key[k], rule, base, by_key, 32).tolist()
            for k, rule in search_axes(model).items()}
    divs = divisors(32)
    degrees = np.array([(tp, pp, cp, 32 // (tp * pp * cp)) for tp, pp, cp in
                        itertools.product(divs, divs, divs) if 32 % (tp * pp * cp) == 0],
                       dtype=np.float64)
    # every degree tuple joined with every combination of the other axes' candidates: the
    # rows of itertools.product(degrees, *full.values()), built as columns
    rest = np.stack(np.meshgrid(*map(np.asarray, full.values()), indexing="ij")).reshape(
        len(full), -1)
    cols = np.concatenate([np.repeat(degrees.T, rest.shape[1], axis=1),
                           np.tile(rest, len(degrees))]).astype(np.float64)
    n = cols.shape[1]
    assert n == len(degrees) * math.prod(len(v) for v in full.values())
    values = {**{k: np.float64(v) for k, v in base.items()},
              **dict(zip(["tp", "pp", "cp", "dp", *full], cols, strict=True))}
    ok = np.logical_and.reduce([np.broadcast_to(c, (n,)) for c in check(values)])
    assert result.stats.space == n
    assert result.stats.kept + result.stats.extra["do not fit in memory"] + \
        result.stats.extra.get(AUTO_TWINS, 0) == int(ok.sum())
    assert result.stats.invalid == result.stats.total - int(ok.sum())
    names = ["tp", "pp", "cp", "dp", *full]
    kept = set(zip(*(result[k].tolist() for k in names), strict=True))
    valid = set(map(tuple, cols[:, ok].T.tolist()))
    assert len(kept) == result.stats.kept and kept <= valid


def test_fix_limits_the_axes(engine):
    r = search(LLAMA, gpus=64, sets=SEED, engine=engine,
               fix=["parallelism.pp=4", "training.recompute=selective,full", "parallelism.tp=8"])
    assert set(r["pp"].tolist()) == {4} and set(r["tp"].tolist()) == {8}
    assert set(r.values("recompute")) <= {"selective", "full"}
    assert set(r["dp"].tolist()) <= {1, 2}


def test_fix_of_a_key_search_does_not_vary_is_a_setting_or_an_axis(engine):
    one = search(LLAMA, gpus=64, sets=SEED, engine=engine, fix=["training.seq_len=2048"])
    assert one.config.values["seq_len"] == 2048
    two = search(LLAMA, gpus=64, sets=SEED, engine=engine,
                 fix=["training.global_batch=512,1024"])
    assert set(two["global_batch"].tolist()) == {512, 1024}


@pytest.mark.parametrize("objective, descending", [
    ("mfu", True), ("cost_usd", False), ("tokens_per_second", True), ("min:mfu", False),
    ("max:memory_per_gpu", True),
])
def test_objective_direction(engine, objective, descending):
    r = search(LLAMA, gpus=64, sets=SEED, engine=engine, objective=objective)
    name = objective.split(":")[-1]
    assert r.objective == name and r.descending == descending
    column = np.asarray(r[name])
    assert np.all(np.diff(column) <= 0) if descending else np.all(np.diff(column) >= 0)


def test_max_memory(engine):
    r = search(LLAMA, gpus=64, sets=SEED, engine=engine, max_memory=0.5)
    assert np.all(r["memory_per_gpu"] <= 0.5 * r["hbm_capacity"])


def test_pareto_front_is_the_set_of_non_dominated_layouts(seed):
    front = seed.pareto
    assert 1 < len(front) < len(seed)
    pts = np.column_stack([seed["step_time"], seed["memory_per_gpu"]])
    fpts = np.column_stack([front["step_time"], front["memory_per_gpu"]])
    for p in fpts:  # nothing beats a front point on both
        beaten = np.all(pts <= p, axis=1) & np.any(pts < p, axis=1)
        assert not beaten.any()
    for p in pts[::37]:  # every other point is matched or beaten by the front
        assert np.any(np.all(fpts <= p, axis=1))


def test_pareto_front_on_a_small_table():
    t = Table({"a": [1.0, 2, 3, 2, 1], "b": [5.0, 3, 1, 4, 5]})
    assert sorted(pareto_front(t, [("a", False), ("b", False)]).tolist()) == [0, 1, 2]
    assert pareto_front(t, [("a", True), ("b", True)]).tolist() == [2, 3, 0]  # one of 0, 4


def test_several_gpu_counts(engine):
    r = search(LLAMA, gpus=[256, 512], sets=SEED, engine=engine, objective="cost_usd",
               pareto="training_days,cost_usd")
    assert set(r["gpus"].tolist()) == {256, 512}
    assert r.layout[0] == "gpus"
    assert len(r.pareto) >= 2


def test_recommendation_names_the_best_and_why(seed):
    lines = seed.recommendation
    best = seed.rows()[0]
    assert lines[0] == "Recommended: " + " ".join(f"{k}={best[k]}" for k in seed.layout)
    assert lines[1].startswith("- lowest step_time (") and "layouts that run and fit" in lines[1]
    assert any(line.startswith("- needs ") and "headroom" in line for line in lines)
    assert any(line.startswith("- limited by: ") for line in lines)


def test_nothing_fits(engine):
    r = search(LLAMA, gpus=8, sets=SEED + ["hardware.hbm_capacity=1GiB"], engine=engine)
    assert len(r) == 0
    assert r.recommendation[0].startswith("No layout fits in memory.")


def test_405b_on_16384_gpus_runs(engine):
    r = search(None, gpus=16384, engine=engine, top=3,
               sets=["model.preset=llama3.1-405b", "hardware.node=h100-sxm",
                     "training.seq_len=8192", "training.global_batch=2048",
                     "training.tokens=15.6e12"])
    assert r.stats.total > 1_000_000 and len(r) == 3
    assert set(r["tp"].tolist()) <= {1, 2, 4, 8}  # 8 KV heads


def test_generic_axes_from_a_plugin(engine, tmp_path):
    """An input with the key parallelism.ep (and parallelism.schedule, now in the core) is
    searched, with its constraints, without any change to search.py."""
    from dlformula import Engine
    from dlformula.resources import DataFolder, builtin_folders
    from dlformula.sweep import input_by_key

    eng = engine
    if "parallelism.ep" not in input_by_key(engine.model):
        folder = tmp_path / "formulas"
        folder.mkdir()
        (folder / "moe_test.yaml").write_text(
            "inputs:\n"
            "  ep: {unit: GPU, default: 1, domain: integer >= 1, config: parallelism.ep,\n"
            "       doc: Expert-parallel degree.}\n"
            "quantities:\n"
            "  expert_groups: {expr: dp / ep, unit: 1, doc: Expert groups., source: test}\n"
            "constraints:\n"
            "  - {name: ep_divides_dp, check: dp % ep == 0, message: ep must divide dp}\n")
        eng = Engine(folders=builtin_folders() + [DataFolder("formulas", folder, "test")],
                     use_cache=False)
    if eng is engine:  # the built-in MoE plugin: expert parallelism needs an MoE model
        from conftest import DATA

        r = search(str(DATA / "plugins" / "mixtral-8x7b.yaml"), gpus=64, engine=eng,
                   fix=["parallelism.tp=2"])
        assert np.all(8 % r["ep"] == 0)  # experts divisible by ep (Megatron-core)
    else:
        r = search(LLAMA, gpus=64, sets=SEED, engine=eng, fix=["parallelism.tp=8"])
    assert "ep" in r.layout
    assert r["ep"].max() > 1
    if eng is not engine:
        assert np.all(r["dp"] % r["ep"] == 0)
        assert r.stats.rejected.get("ep_divides_dp", 0) > 0
    if "parallelism.schedule" in input_by_key(eng.model):
        assert "schedule" in r.layout and len(set(r.values("schedule"))) > 1


def test_holding_only_the_best_gives_the_same_answer(engine):
    """With `top`, rows that cannot be in the answer are dropped as the blocks come; the best
    rows, the Pareto front and the recommendation are those of ranking everything."""
    from dlformula import search_rank

    every = search(LLAMA, gpus=64, sets=SEED, engine=engine, pareto="step_time,memory_per_gpu")
    old = search_rank.REDUCE_AT
    search_rank.REDUCE_AT = 500  # reduce often, with cut-offs, on this small space
    try:
        best = search(LLAMA, gpus=64, sets=SEED, engine=engine, top=5,
                      pareto="step_time,memory_per_gpu")
    finally:
        search_rank.REDUCE_AT = old
    assert len(best) == 5 and best.stats.kept == len(every)
    assert best.rows() == every.head(5).rows()
    assert best.pareto.rows() == every.pareto.rows()
    assert best.recommendation == every.recommendation


def test_a_group_spanning_the_domain_names_the_best_one_inside_it(engine):
    """Not a fixed '(no smaller group fits)': the best layout whose group fits, if any."""
    from dlformula.search import SearchResult, _fabric_reasons

    def result(tps: list[int]) -> SearchResult:
        r = SearchResult({"tp": np.asarray(tps, dtype=float), "cp": np.ones(len(tps)),
                          "step_time": np.arange(1.0, len(tps) + 1)}, {}, {"step_time": "s"})
        r.layout, r.objective = ["tp", "cp"], "step_time"
        return r

    spans = result([16, 16, 8])
    text = _fabric_reasons({"tp": 16, "cp": 1}, 8, spans)[0]
    assert text.endswith("; the best layout whose group fits it, tp=8 cp=1, is 200.0 % "
                         "higher on step_time")
    text = _fabric_reasons({"tp": 16, "cp": 1}, 8, result([16, 32]))[0]
    assert text.endswith("(no layout whose group fits in the domain runs and fits in memory)")


# -- the command line ---------------------------------------------------------------------------
def test_cli_search(run):
    code, out, err = run("search", LLAMA, "--gpus", "64", *sum((["--set", s] for s in SEED), []),
                         "-k", "3", "--pareto", "step_time,memory_per_gpu")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == ("Search: llama3-70b on 64 x h100-sxm; objective step_time (lower is "
                        "better)")
    assert re.match(r"^[\d,]+ layouts considered, of [\d,]+ before ruling out axis values no "
                    r"layout can use \(ep 7 -> 1 \(ep_needs_experts\)", lines[1])
    assert re.search(r"\); [\d,]+ break a constraint \(", lines[1])
    assert lines[3].split()[:4] == ["rank", "tp", "pp", "cp"]
    assert lines[4].split()[0] == "1"
    assert any(line.startswith("Pareto front (") for line in lines)
    assert any(line.startswith("Recommended: ") for line in lines)


def test_cli_search_csv(run, tmp_path):
    path = tmp_path / "layouts.csv"
    code, out, err = run("search", LLAMA, "--gpus", "64", "--set", SEED[0], "--set", SEED[1],
                         "-o", str(path), "--format", "csv")
    assert code == 0
    header = out.splitlines()[0].split(",")
    assert header[:4] == ["tp", "pp", "cp", "dp"] and "limited_by" in header
    assert path.read_text() == out


@pytest.mark.parametrize("args, message", [
    (["--gpus", "0"], "error: --gpus 0: give whole GPU counts, e.g. --gpus 64 or "
                      "--gpus 256,512,1024 or --gpus 64..1024:x2"),
    (["--gpus", "64", "--objective", "step_tme"],
     "error: --objective step_tme: no such quantity (did you mean 'step_time'?); e.g. "
     "step_time, cost_usd, mfu, tokens_per_second, training_days, memory_per_gpu"),
    (["--gpus", "64", "--pareto", "step_time"],
     "error: --pareto needs two or more objectives, e.g. --pareto step_time,memory_per_gpu"),
    (["--gpus", "64", "--fix", "hardware.gpus=8"],
     "error: --fix hardware.gpus: give the GPU count with --gpus"),
    (["--gpus", "64", "--fix", "parallelism.pp=0"],
     "error: --fix parallelism.pp=0: must be integer >= 1"),
    (["--gpus", "64", "--max-memory", "0"],
     "error: --max-memory 0.0: give the usable share of HBM, e.g. 0.9"),
    (["--gpus", "64", "--fix", "hardware.node=h100-sxm,b200"],
     "error: --fix hardware.node: search one at a time (or compare them with `dlformula sweep "
     "--vary`)"),
])
def test_cli_errors(run, args, message):
    code, out, err = run("search", LLAMA, *args)
    assert (code, out, err.rstrip("\n")) == (2, "", message)


def test_cli_nothing_fits(run):
    code, out, err = run("search", LLAMA, "--gpus", "8", "--set", "hardware.hbm_capacity=1GiB")
    assert code == 0
    assert "No layout fits in memory." in out


def test_plot_needs_matplotlib(run, monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, out, err = run("search", LLAMA, "--gpus", "64", "--plot", str(tmp_path / "s.png"))
    assert code == 2
    assert err.splitlines()[-1] == ("error: plotting needs matplotlib, which is not installed; "
                                    "pip install 'dlformula[plot]'")


@pytest.mark.parametrize("args", [
    ["plot", "memory", LLAMA, "--vary", "parallelism.tp=2,4,8"],
    ["plot", "time", LLAMA],
    ["plot", "sweep", LLAMA, "--vary", "parallelism.tp=2,4,8", "--vary",
     "training.micro_batch=1..4"],
    ["plot", "sweep", LLAMA, "--vary", "parallelism.tp=2,4,8", "-y", "memory_per_gpu"],
    ["plot", "search", LLAMA, "--gpus", "64", "--set", SEED[0], "--set", SEED[1]],
    ["sweep", LLAMA, "--vary", "parallelism.tp=2,4,8", "--plot"],
    ["search", LLAMA, "--gpus", "64", "--plot"],
])
def test_plots(run, tmp_path, args):
    pytest.importorskip("matplotlib")
    path = tmp_path / "out.png"
    args = args + [str(path)] if args[-1] == "--plot" else args + ["-o", str(path)]
    code, out, err = run(*args)
    assert code == 0, err
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_breakdown_parts_add_up_to_the_total(engine):
    """`plot memory` drew one bar once memory_per_gpu stopped being a plain sum (its parts were
    read from the formula text with a regex). The parts now come from the formulas' structure,
    as the workbook's, and stack to the total."""
    from dlformula.plot import _part_values, breakdown

    for total in ("memory_per_gpu", "step_time"):
        parts = breakdown(engine, total)
        assert len(parts) >= 3, total
        r = engine.evaluate(LLAMA)
        used = {s.name for _, e in parts for s in e.free_symbols}
        data = _part_values(parts, {n: r[n] for n in used}, 1, 1.0)
        assert sum(float(v[0]) for v in data.values()) == pytest.approx(r[total], rel=1e-9)


def test_a_sweep_plot_shows_the_first_result_column_not_the_filled_dp(engine):
    """`sweep --vary parallelism.tp=... --plot` drew dp (the column the sweep fills in to keep
    the GPU count) over tp; it draws the first of the sweep's result columns."""
    from dlformula.display import result_columns
    from dlformula.plot import default_y
    from dlformula.sweep import sweep

    t = sweep(LLAMA, vary=["parallelism.tp=2,4,8"], engine=engine)
    assert "dp" in t.names and t.filled == ["dp"]
    assert default_y(t) == result_columns(engine.model)[0] == "step_time"
    t = sweep(LLAMA, vary=["parallelism.tp=2,4,8"], engine=engine, columns=["dp", "mfu"])
    assert t.filled == [] and default_y(t) == "dp"  # asked for: shown


def test_plot_axes_read_in_the_units_eval_prints(engine):
    """plot.py kept its own table of scales (GiB, TFLOP/s, M USD ...) beside humanize's. An
    axis now reads in the unit `eval` prints its largest value in (humanize.readable_unit)."""
    from dlformula.humanize import human
    from dlformula.plot import scale_of

    r = engine.evaluate(LLAMA)
    units = {n: q.unit for n, q in engine.model.quantities.items()}
    seen = set()
    for name, value in r.values.items():
        if name not in units or isinstance(value, bool) or not value:
            continue
        factor, text = scale_of([value / 3, value], units[name])
        number, unit_text = human(value, units[name])
        assert text == unit_text, name
        assert value / factor == pytest.approx(float(number.replace(",", "")), rel=5e-3,
                                                abs=5e-3), name  # (2 decimals for bytes)
        seen.add(text)
    assert {"GiB", "s", "TFLOP/s", "days", "USD"} <= seen, seen
    assert scale_of([0.25, 0.5], "1", percent=True) == (0.01, "%")
    assert scale_of([float("nan"), 3e-3, 2e-3], "s") == (pytest.approx(1e-3), "ms")


def test_auto_recompute_is_ranked_only_where_it_differs_from_the_named_choices(engine, seed):
    """`auto` with no layer recomputed in full is `none` (fused attention) under another name,
    and with every layer in full it is `full`: search ranks the named choice and leaves the
    twin out, so the top ranks are distinct layouts. Fixed alone, auto is kept."""
    model = engine.model
    auto = dict(model.inputs["recompute"].choices)["auto"]
    rows = seed.head(400)
    layout = [k for k in seed.layout if k != "recompute"]
    seen = {}
    for row in rows.rows():
        key = tuple(row[k] for k in layout) + (row["step_time"], row["memory_per_gpu"])
        seen.setdefault(key, []).append(row["recompute"])
    assert all(len(v) == 1 for v in seen.values())
    for row in rows.rows():
        if row["recompute"] == "auto":
            sets = SEED + layout_sets(engine, seed, row) + ["hardware.gpus=64"]
            share = model.evaluate(engine.config(LLAMA, sets, check_layout=False).values)[
                "full_recompute_share"]
            assert 0 < share < 1
    only = search(LLAMA, gpus=64, sets=SEED, fix={"training.recompute": ["auto"]},
                  engine=engine, top=5)
    assert len(only) == 5 and set(only.values("recompute")) == {"auto"}
    assert auto in dict(model.inputs["recompute"].choices).values()


def test_a_recommended_recompute_mode_of_one_framework_says_so(engine):
    r = search(LLAMA, gpus=64, sets=SEED, engine=engine,
               fix=["training.recompute=save_qkv_proj"])
    assert any(line.startswith("- recompute=save_qkv_proj is MaxText's JAX remat policy")
               and "--fix training.recompute=none,selective,full,auto" in line
               for line in r.recommendation)
    portable = search(LLAMA, gpus=64, sets=SEED, engine=engine,
                      fix=["training.recompute=selective,full"])
    assert not any(line.startswith("- recompute=") for line in portable.recommendation)
