"""`dlformula sweep` and `sweep(...)`: grids, constraints counted, filters, output, the CLI."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import EXAMPLES
from dlformula.errors import UsageError
from dlformula.sweep import Where, parse_values, sweep
from dlformula.table import Table

LLAMA = str(EXAMPLES / "llama3-70b.yaml")


@pytest.fixture(autouse=True, scope="module")
def commands():
    """Register the commands the lead wires into cli.py, if they are not there yet."""
    from dlformula.cli import cli
    from dlformula.cli_sweep import COMMANDS

    for command in COMMANDS:
        if command.name not in cli.commands:
            cli.add_command(command)


# -- values -------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, values", [
    ("1,2,4", [1, 2, 4]),
    ("1..4", [1, 2, 3, 4]),
    ("0..1:0.25", [0.0, 0.25, 0.5, 0.75, 1.0]),
    ("1..64:x2", [1, 2, 4, 8, 16, 32, 64]),
    ("1..100:x10", [1, 10, 100]),
    ("1e9..3e9:1e9", [1e9, 2e9, 3e9]),
    ("none, full", ["none", "full"]),
    ("true,false", [True, False]),
    ("1,8..9", [1, 8, 9]),
])
def test_parse_values(text, values):
    assert parse_values(text, "--vary k") == values


@pytest.mark.parametrize("text, message", [
    ("8..1", "--vary k: range '8..1' runs backwards; write LO..HI"),
    ("1..8:x1", "--vary k: '1..8:x1' needs a factor above 1 and a positive start"),
    ("1,,2", "--vary k: empty value; write e.g. 1,2,4 or 1..8 or 1..64:x2"),
    ("1..1e12", "--vary k: '1..1e12' gives 1,000,000,000,000 values; at most 10,000,000 per "
                "axis"),
])
def test_parse_values_refuses(text, message):
    with pytest.raises(UsageError) as exc:
        parse_values(text, "--vary k")
    assert str(exc.value) == message


# -- the grid -----------------------------------------------------------------------------------
def test_grid_is_the_cartesian_product_in_order(engine):
    t = sweep(LLAMA, vary=["parallelism.tp=4,8", "training.micro_batch=1,2"], engine=engine,
              columns=["step_time"])
    assert t.stats.total == 4
    assert t.values("tp") == [4, 4, 8, 8]
    assert t.values("micro_batch") == [1, 2, 1, 2]
    assert t.axes == ["tp", "micro_batch"]


def test_zip_moves_values_together(engine):
    t = sweep(LLAMA, vary={"training.recompute": ["none", "full"]},
              paired={"parallelism.tp": [8, 4], "parallelism.dp": [16, 32]}, engine=engine)
    assert t.stats.total == 4
    assert list(zip(t.values("recompute"), t.values("tp"), t.values("dp"), strict=False)) == [
        ("none", 8, 16), ("none", 4, 32), ("full", 8, 16), ("full", 4, 32)]


def test_each_row_equals_a_scalar_evaluation(engine):
    t = sweep(LLAMA, vary=["parallelism.tp=2,4,8", "parallelism.pp=2,4",
                           "training.recompute=none,full"], engine=engine,
              columns=["step_time", "memory_per_gpu", "cost_usd"])
    assert len(t) == 12
    for row in t.rows():
        sets = [f"parallelism.tp={row['tp']}", f"parallelism.pp={row['pp']}",
                f"parallelism.dp={row['dp']}", f"training.recompute={row['recompute']}"]
        one = engine.evaluate(LLAMA, sets)
        for name in ("step_time", "memory_per_gpu", "cost_usd"):
            assert row[name] == pytest.approx(float(one[name]), rel=1e-12)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4, 8]),
       mb=st.integers(1, 4), zero=st.integers(0, 3), seq=st.sampled_from([2048, 4096, 8192]))
def test_vectorized_equals_one_config_at_a_time(engine, tp, pp, mb, zero, seq):
    sets = [f"training.seq_len={seq}", f"parallelism.zero={zero}"]
    t = sweep(LLAMA, vary=[f"parallelism.tp={tp}", f"parallelism.pp={pp}",
                           f"training.micro_batch={mb}"], sets=sets, engine=engine,
              columns=["step_time", "mfu", "memory_per_gpu"])
    cfg = engine.config(LLAMA, sets + [f"parallelism.tp={tp}", f"parallelism.pp={pp}",
                                       f"training.micro_batch={mb}",
                                       f"parallelism.dp={512 // (tp * pp)}"],
                        check_layout=False)
    ok = all(engine.model.check(cfg.values))
    assert len(t) == (1 if ok else 0)
    if ok:
        one = engine.model.evaluate(cfg.values)
        for name in ("step_time", "mfu", "memory_per_gpu"):
            assert float(t[name][0]) == pytest.approx(one[name], rel=1e-12)


def test_rejections_are_counted_once_under_the_first_constraint_broken(engine):
    t = sweep(LLAMA, vary=["parallelism.pp=1..16", "parallelism.vpp=1,2,5",
                           "training.micro_batch=1..3"], engine=engine)
    s = t.stats
    assert s.total == 16 * 3 * 3
    assert s.invalid + s.kept == s.total
    # The same count, config by config, with the scalar constraint checker.
    model = engine.model
    expected: dict[str, int] = {}
    for pp in range(1, 17):
        for vpp in (1, 2, 5):
            for mb in (1, 2, 3):
                if 512 % (8 * pp):
                    expected["gpus_divisible_by_layout"] = expected.get(
                        "gpus_divisible_by_layout", 0) + 1
                    continue
                cfg = engine.config(LLAMA, [f"parallelism.pp={pp}", f"parallelism.vpp={vpp}",
                                            f"training.micro_batch={mb}",
                                            f"parallelism.dp={512 // (8 * pp)}"],
                                    check_layout=False)
                for ok, c in zip(model.check(cfg.values), model.constraints, strict=False):
                    if not ok:
                        expected[c.name] = expected.get(c.name, 0) + 1
                        break
    assert s.rejected == expected


def test_dp_fills_the_gpus_unless_kept(engine):
    t = sweep(LLAMA, vary=["parallelism.tp=1,2,4,8", "hardware.gpus=256,512"], engine=engine,
              columns=["step_time"])
    assert [r["dp"] for r in t.rows()] == [64, 128, 32, 64, 16, 32, 8, 16]  # pp = 4
    kept = sweep(LLAMA, vary=["parallelism.tp=1,2,4,8"], engine=engine, fill_dp=False)
    assert kept.values("tp") == [8]  # the config's dp = 16 only matches tp = 8
    assert kept.stats.rejected == {"layout_matches_gpus": 3}


def test_gpus_that_the_layout_does_not_divide_are_counted(engine):
    t = sweep(LLAMA, vary=["parallelism.tp=3,8"], engine=engine)
    assert t.stats.rejected.get("gpus_divisible_by_layout") == 1


def test_node_axis_changes_every_figure_of_the_node(engine):
    t = sweep(LLAMA, vary=["hardware.node=h100-sxm,a100-sxm4-80gb,b200"], engine=engine,
              columns=["step_time", "hbm_capacity", "peak_flops"])
    assert t.values("node") == ["h100-sxm", "a100-sxm4-80gb", "b200"]
    for row in t.rows():
        one = engine.evaluate(LLAMA, [f"hardware.node={row['node']}"])
        assert row["step_time"] == pytest.approx(float(one["step_time"]), rel=1e-12)
        assert row["peak_flops"] == float(one["peak_flops"])


def test_explicit_keys_win_over_the_node(engine):
    t = sweep(LLAMA, vary=["hardware.node=h100-sxm,b200", "hardware.hbm_capacity=40GiB"],
              engine=engine, columns=["hbm_capacity"])
    assert set(t["hbm_capacity"].tolist()) == {40 * 2.0**30}


def test_preset_axis(engine):
    t = sweep(LLAMA, vary=["model.preset=llama3-70b,llama2-70b"], engine=engine,
              columns=["total_params"] if "total_params" in engine.model.quantities
              else ["step_time"])
    assert t.values("preset") == ["llama3-70b", "llama2-70b"]


def test_where_filters_with_units_and_choice_labels(engine):
    t = sweep(LLAMA, vary=["training.recompute=none,selective,full", "parallelism.tp=4,8"],
              where=["memory_per_gpu < 40 * GiB", "recompute != 'none'"], engine=engine,
              columns=["memory_per_gpu"])
    assert all(v < 40 * 2**30 for v in t["memory_per_gpu"])
    assert "none" not in t.values("recompute")
    assert t.stats.removed_by_where == 6 - len(t)


@pytest.mark.parametrize("text, message", [
    ("memory < 3", "--where 'memory < 3': unknown name 'memory' (did you mean 'act_memory'?); "
                   "`dlformula list` shows them"),
    ("__import__('os')", "--where '__import__('os')': dunder names like '__import__' are not "
                         "allowed in formulas"),
    ("tp.real > 1", "--where 'tp.real > 1': attribute access ('.real') is not allowed; "),
    ("recompute == 'ful'", "--where 'recompute == 'ful'': 'ful' is not a choice of 'recompute'; "
                           "choices: none, selective, full"),
    ("tp == 'x'", "--where 'tp == 'x'': 'tp' is not a choice input, so it cannot be compared "
                  "with text"),
    # units are checked as in a formula file: a bare number is not a size
    ("memory_per_gpu < 70", "--where 'memory_per_gpu < 70': unit mismatch: both sides of a "
                            "comparison are 1 and byte"),
])
def test_where_refuses(engine, text, message):
    with pytest.raises(UsageError) as exc:
        w = Where(text, engine.model)
        w({"tp": np.ones(1), "recompute": np.ones(1)}, 1)
    assert str(exc.value).startswith(message)


def test_chunking_does_not_change_the_result(engine):
    kwargs = dict(vary=["parallelism.tp=1,2,4,8", "parallelism.pp=1..8",
                        "training.micro_batch=1..4"], engine=engine, columns=["step_time"])
    whole = sweep(LLAMA, **kwargs)
    pieces = sweep(LLAMA, chunk_size=7, **kwargs)
    assert whole.stats.rejected == pieces.stats.rejected
    np.testing.assert_array_equal(whole["step_time"], pieces["step_time"])


def test_top_keeps_the_best_rows_in_bounded_memory(engine):
    kwargs = dict(vary=["parallelism.tp=1,2,4,8", "parallelism.pp=1..8",
                        "training.micro_batch=1..4", "parallelism.zero=0..3"], engine=engine,
                  columns=["step_time"])
    every = sweep(LLAMA, sort="step_time", **kwargs)
    best = sweep(LLAMA, sort="step_time", top=5, chunk_size=16, **kwargs)
    np.testing.assert_array_equal(best["step_time"], every["step_time"][:5])
    worst = sweep(LLAMA, sort="-step_time", top=3, chunk_size=16, **kwargs)
    np.testing.assert_array_equal(worst["step_time"], every["step_time"][::-1][:3])


def test_streaming_without_keeping(engine, tmp_path):
    out = tmp_path / "rows.csv"
    t = sweep(LLAMA, vary=["parallelism.tp=1,2,4,8", "training.tokens=1e12..100e12:1e12"],
              engine=engine, output=str(out), keep=False, chunk_size=50)
    assert len(t) == 0 and t.stats.kept == 400
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 400 and rows[0]["tp"] == "1" and rows[-1]["tp"] == "8"


# -- output -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small(engine):
    return sweep(LLAMA, vary=["training.recompute=none,full", "parallelism.tp=4,8"],
                 engine=engine, columns=["step_time", "memory_per_gpu", "sp"])


def test_csv_round_trips(small):
    rows = list(csv.DictReader(io.StringIO(small.to_csv())))
    assert [r["recompute"] for r in rows] == ["none", "none", "full", "full"]
    assert float(rows[0]["step_time"]) == small["step_time"][0]
    assert rows[0]["memory_per_gpu"] == str(int(small["memory_per_gpu"][0])) or float(
        rows[0]["memory_per_gpu"]) == small["memory_per_gpu"][0]


def test_json_rows(small):
    rows = json.loads(small.to_json())
    assert rows == json.loads(json.dumps(small.rows()))
    assert rows[0]["recompute"] == "none" and rows[0]["tp"] == 4


def test_xlsx(small, tmp_path):
    from openpyxl import load_workbook

    path = tmp_path / "s.xlsx"
    small.write(str(path))
    sheet = load_workbook(path).active
    values = list(sheet.values)
    assert values[0][:4] == ("recompute", "tp (GPU)", "dp (GPU)", "step_time (s)")
    assert values[1][0] == "none" and values[1][3] == pytest.approx(small["step_time"][0])


def test_xlsx_row_limit(small, tmp_path, monkeypatch):
    import dlformula.table as table_module

    monkeypatch.setattr(table_module, "XLSX_MAX_ROWS", 3)
    with pytest.raises(UsageError) as exc:
        small.write(str(tmp_path / "s.xlsx"))
    assert str(exc.value) == ("more than 3 rows do not fit in an Excel sheet; write .csv or "
                              ".json, or narrow the sweep with --where")


def test_table_api(small):
    assert len(small) == 4 and "step_time" in small
    ordered = small.sort("memory_per_gpu")
    assert list(ordered["memory_per_gpu"]) == sorted(small["memory_per_gpu"])
    assert small.head(2).values("tp") == [4, 8]
    assert "GiB" in small.format() and "recompute" in repr(small)
    t = Table({"x": [1.0, float("nan")], "y": [0.5, 1]})
    assert t.rows() == [{"x": 1, "y": 0.5}, {"x": None, "y": 1}]


# -- the command line ---------------------------------------------------------------------------
def test_cli_table(run):
    code, out, err = run("sweep", LLAMA, "--vary", "parallelism.tp=1,2,4,8", "--vary",
                         "training.micro_batch=1..8", "--where",
                         "memory_per_gpu < 0.9 * hbm_capacity", "--sort", "step_time", "-n", "3")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["tp", "micro_batch", "dp"]
    assert lines[-1].startswith("32 configs; ")
    assert "removed by --where" in lines[-1]


def test_cli_csv_to_stdout(run):
    code, out, err = run("sweep", LLAMA, "--vary", "parallelism.tp=4,8", "--format", "csv",
                         "--columns", "step_time")
    assert code == 0
    assert out.splitlines()[0] == "tp,dp,step_time"
    assert err.startswith("2 configs; 2 kept")


def test_cli_output_file(run, tmp_path):
    path = tmp_path / "out.json"
    code, out, err = run("sweep", LLAMA, "--vary", "parallelism.tp=4,8", "-o", str(path))
    assert code == 0 and out == ""
    assert err.splitlines()[0] == f"wrote 2 rows to {path}"
    assert len(json.loads(path.read_text())) == 2


@pytest.mark.parametrize("args, message", [
    ([], "error: give at least one --vary KEY=VALUES, e.g. --vary parallelism.tp=1,2,4,8"),
    (["--vary", "parallelism.tp=0,3,-1"],
     "error: --vary parallelism.tp=0: must be integer >= 1\n"
     "error: --vary parallelism.tp=-1: must be integer >= 1"),
    (["--vary", "paralelism.tp=1"],
     "error: --vary paralelism.tp: unknown key (did you mean 'parallelism.tp'?); "
     "`dlformula list` shows every input and its config key"),
    (["--vary", "parallelism.tp"],
     "error: --vary 'parallelism.tp': write KEY=VALUES, e.g. --vary parallelism.tp=1,2,4,8 or "
     "training.micro_batch=1..8"),
    (["--vary", "training.recompute=none,ful"],
     "error: --vary training.recompute=ful: must be one of none, selective, full, op, auto, "
     "save_qkv_proj, save_dots, save_weight_dots"),
    (["--vary", "parallelism.tp=1", "--vary", "parallelism.tp=2"],
     "error: --vary parallelism.tp: the key is given twice; list all its values once"),
    (["--vary", "hardware.node=h100,b200"],
     "error: --vary hardware.node: unknown hardware node 'h100' (did you mean 'h200'?); "
     "`dlformula hardware` lists them"),
    (["--zip", "parallelism.tp=1,2", "--zip", "parallelism.zero=1,2,3"],
     "error: --zip axes move together, so they need the same number of values "
     "(parallelism.tp has 2, parallelism.zero has 3)"),
    (["--vary", "parallelism.tp=1", "-o", "out.txt"],
     "error: cannot tell the format of 'out.txt'; name the file .csv, .json or .xlsx"),
    (["--set", "parallelism.dp=3", "--vary", "training.micro_batch=1,2"],
     "error: every config breaks a constraint no axis changes: tp x pp x dp x cp = 96 but "
     "hardware.gpus = 512; make the product equal the GPU count"),
    (["--vary", "parallelism.tp=1", "--columns", "step_tme"],
     "error: --columns step_tme: no such name (did you mean 'step_time'?); `dlformula list` "
     "shows them"),
])
def test_cli_errors(run, args, message):
    code, out, err = run("sweep", LLAMA, *args)
    assert (code, out, err.rstrip("\n")) == (2, "", message)


def test_cli_nothing_left(run):
    code, out, err = run("sweep", LLAMA, "--vary", "parallelism.tp=8", "--where",
                         "memory_per_gpu < 1 * GiB")
    assert code == 0
    assert out.startswith("No config is left.\n1 config; 1 removed by --where; 0 kept (")


def test_progress_bar_only_after_a_second_and_on_a_terminal():
    from dlformula.cli_sweep import Progress

    quiet = io.StringIO()
    p = Progress(quiet)  # a StringIO is no terminal: lines, every 30 s by default
    p(5, 10)
    assert quiet.getvalue() == ""
    shown = io.StringIO()
    p = Progress(shown, delay=0.0, force=True)
    p(5, 10)
    p.close()
    assert "50.0 %" in shown.getvalue() and "5/10 configs" in shown.getvalue()
    late = io.StringIO()
    p = Progress(late, delay=60.0, force=True)
    p(5, 10)
    assert late.getvalue() == ""


def test_cli_module_imports_only_click():
    code = ("import sys, dlformula.cli_sweep; "
            "print(sorted(m for m in ('numpy', 'matplotlib', 'sympy', 'dlformula.sweep', "
            "'dlformula.table', 'dlformula.core') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert res.stdout.strip() == "[]"


def test_a_run_off_a_terminal_prints_progress_lines_at_a_modest_rate(monkeypatch):
    from dlformula import cli_sweep

    clock = [100.0]
    monkeypatch.setattr(cli_sweep.time, "perf_counter", lambda: clock[0])
    log = io.StringIO()
    p = cli_sweep.Progress(log, every=30.0)
    for done in range(1, 100):  # a block every second for 99 s
        clock[0] += 1.0
        p(done * 1_000_000, 100_000_000)
    lines = log.getvalue().splitlines()
    assert len(lines) == 3  # at 30, 60 and 90 s
    assert lines[0] == "progress: 30.0 % (30,000,000 of 100,000,000 configs, 1.00 M/s, 70 s left)"
    assert "\r" not in log.getvalue()
    p.close()
    assert len(log.getvalue().splitlines()) == 3


# -- work limits ---------------------------------------------------------------------------------
def test_a_grid_above_the_limit_needs_yes_or_max_configs(engine, run):
    big = ["--vary", "training.tokens=1..100000", "--vary", "training.seq_len=1024..20023"]
    code, _, err = run("sweep", LLAMA, *big)
    assert code == 2
    assert err.splitlines() == ["error: the grid has 1,900,000,000 configs, more than the limit "
                                "of 1,000,000,000; narrow the axes, or run it anyway with --yes "
                                "(or raise --max-configs)"]
    code, _, err = run("sweep", LLAMA, "--vary", "parallelism.tp=1,2,4,8", "--max-configs", "3")
    assert code == 2 and "more than --max-configs 3;" in err
    t = sweep(LLAMA, vary=["parallelism.tp=1,2,4,8"], engine=engine, max_configs=4)
    assert t.stats.total == 4


# -- layouts that do not fit ----------------------------------------------------------------------
def test_rows_that_do_not_fit_in_memory_are_marked(engine, run):
    t = sweep(LLAMA, vary=["parallelism.tp=1,8", "parallelism.pp=1,8"], engine=engine)
    fits = np.asarray(t["fits_memory"], dtype=bool)
    assert (fits == (t["memory_per_gpu"] <= t.config.values["hbm_capacity"])).all()
    assert fits.any() and not fits.all()
    assert set(t.values("fits_memory")) == {"yes", "no"}
    code, out, _ = run("sweep", LLAMA, "--vary", "parallelism.tp=1,8", "--vary",
                       "parallelism.pp=1,8")
    header = out.splitlines()[0].split()
    assert header[-1] == "fits_memory" and " no" in out and " yes" in out


# -- several processes and a Dask cluster ---------------------------------------------------------
PARALLEL = dict(vary=["parallelism.tp=1,2,4,8", "parallelism.pp=1,2,4,8",
                      "parallelism.tp_comm_overlap=0..1:0.05", "training.micro_batch=1..4"],
                where=["memory_per_gpu < 0.95 * hbm_capacity"], chunk_size=256)


@pytest.mark.parametrize("options", [dict(top=15, sort="step_time"),
                                     dict(top=15, sort="-mfu"), dict(top=40), dict()])
def test_workers_give_the_one_process_result(engine, options):
    one = sweep(LLAMA, engine=engine, workers=1, **PARALLEL, **options)
    two = sweep(LLAMA, engine=engine, workers=2, **PARALLEL, **options)
    assert two.rows() == one.rows()
    assert (two.stats.total, two.stats.rejected, two.stats.removed_by_where, two.stats.kept) == (
        one.stats.total, one.stats.rejected, one.stats.removed_by_where, one.stats.kept)
    assert list(two.stats.rejected) == list(one.stats.rejected)


def test_workers_stream_every_row_in_order(engine, tmp_path):
    paths = []
    for workers in (1, 2):
        path = tmp_path / f"rows-{workers}.csv"
        sweep(LLAMA, engine=engine, workers=workers, output=str(path), keep=False, **PARALLEL)
        paths.append(path.read_text())
    assert paths[0] == paths[1] and paths[0].count("\n") > 100


def test_a_search_on_workers_gives_the_one_process_result(engine):
    from dlformula.search import search

    seed = ["training.seq_len=4096", "training.global_batch=1024"]
    one = search(LLAMA, gpus=[32, 64], sets=seed, engine=engine, top=10, pareto="step_time,mfu")
    two = search(LLAMA, gpus=[32, 64], sets=seed, engine=engine, top=10, pareto="step_time,mfu",
                 workers=2)
    assert two.rows() == one.rows() and two.pareto.rows() == one.pareto.rows()
    assert two.recommendation == one.recommendation
    assert (two.stats.kept, two.stats.rejected) == (one.stats.kept, one.stats.rejected)


def test_a_dask_cluster_gives_the_one_process_result(engine):
    """Tasks travel to Dask worker processes (the model as marshal bytes, the plan pickled)
    and only their reduced results come back."""
    distributed = pytest.importorskip("distributed")
    from dlformula.search import search

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        for options in (dict(top=15, sort="step_time"), dict()):
            one = sweep(LLAMA, engine=engine, **PARALLEL, **options)
            far = sweep(LLAMA, engine=engine, scheduler=address, **PARALLEL, **options)
            assert far.rows() == one.rows()
            assert (far.stats.rejected, far.stats.kept) == (one.stats.rejected, one.stats.kept)
        seed = ["training.seq_len=4096", "training.global_batch=1024"]
        one = search(LLAMA, gpus=64, sets=seed, engine=engine, top=5)
        far = search(LLAMA, gpus=64, sets=seed, engine=engine, top=5, scheduler=address)
        assert far.rows() == one.rows() and far.recommendation == one.recommendation


def test_an_unreachable_scheduler_is_one_line(run, monkeypatch):
    pytest.importorskip("distributed")
    from dlformula import parallel

    monkeypatch.setattr(parallel, "CONNECT_TIMEOUT", 1)
    code, _, err = run("sweep", LLAMA, "--vary", "parallelism.tp=1,2", "--scheduler",
                       "tcp://127.0.0.1:9")
    assert code == 2
    assert err.startswith("error: --scheduler tcp://127.0.0.1:9: cannot reach the Dask "
                          "scheduler (")


def test_the_python_api_page_runs(monkeypatch):
    """docs/api.md is a notebook: every block runs, in order, in one namespace."""
    import re

    from conftest import ROOT

    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 6
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, "docs/api.md", "exec"), namespace)  # noqa: S102 (our own docs)
    assert namespace["fast"].rows()  # the two-worker sweep ran and matched one process


def test_where_accepts_every_function_a_formula_accepts(engine):
    """Issue 17.2: --where was a third interpreter that refused log2 and Mod. It now compiles
    through the formula parser, builder and code generator: one function table."""
    from dlformula.expr import functions

    calls = {"Max": "Max(tp, pp)", "Min": "Min(tp, pp)", "ceiling": "ceiling(tp / 3)",
             "ceil": "ceil(tp / 3)", "floor": "floor(tp / 3)", "Abs": "Abs(tp - 8)",
             "Mod": "Mod(tp, 4)", "log": "log(tp)", "log2": "log2(tp)", "exp": "exp(tp / 8)",
             "sqrt": "sqrt(tp)"}
    assert set(calls) >= set(functions()) - set(engine.model.quantities)  # plugins' too below
    for name, call in calls.items():
        t = sweep(LLAMA, vary=["parallelism.tp=1,2,4,8"], where=[f"{call} >= 0"],
                  engine=engine, columns=["step_time"])
        assert len(t) == 4, name
    t = sweep(LLAMA, vary=["parallelism.tp=1,2,4,8"], where=["log2(tp) >= 2 and Mod(tp, 8) != 0"],
              engine=engine, columns=["step_time"])
    assert list(t["tp"]) == [4]
