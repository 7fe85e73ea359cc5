"""The runs files that ship with dlformula (runs/, installed as `dlformula.runs`): named without
a path, listed, every run predicted or skipped for a stated reason, and every run's --show
config evaluating with `dlformula eval` to the prediction validate makes."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from dlformula import validate as v
from dlformula.validation import shipped
from dlformula.validation.show import show

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "runs").glob("*.yaml"))
# The only reasons a run may be skipped (issue 13): no target, or an accelerator with no node.
SKIP_REASONS = re.compile(r"^(the row has no target|no hardware node for )")


def _load_yaml(text):
    """PyYAML's own reading of a runs file (libyaml's loader when built in: 10x faster)."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@pytest.fixture
def run_validate(run):
    from dlformula.cli import cli
    from dlformula.cli_validate import validate

    if "validate" not in cli.commands:
        cli.add_command(validate)
    return run


@pytest.fixture(scope="module")
def reports(engine):
    return {p.stem: v.validate(engine, str(p)) for p in SHIPPED}


def test_every_runs_file_in_runs_ships_by_its_name():
    """Adding a set is dropping a file in runs/: the package finds it by its file name."""
    assert list(shipped.shipped_paths()) == [p.stem for p in SHIPPED]
    assert {"public", "dense-2025", "moe-2025"} <= set(shipped.shipped_paths())
    for name, path in shipped.shipped_paths().items():
        # the installed copy (or the checkout itself, in an editable install) holds the same text
        assert Path(path).name == f"{name}.yaml"
        assert Path(path).read_bytes() == (ROOT / "runs" / f"{name}.yaml").read_bytes()
        assert shipped.resolve(name) == path


def test_a_path_wins_over_a_set_name(tmp_path, monkeypatch):
    (tmp_path / "public").write_text("- id: x\n")
    monkeypatch.chdir(tmp_path)
    assert shipped.resolve("public") == "public"


def test_list_shows_name_runs_sources_and_description(run_validate):
    code, out, err = run_validate("validate", "--list")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["set", "runs", "sources", "description"]
    for path in SHIPPED:
        text = path.read_text()
        first_comment = next(line.lstrip("# ").strip() for line in text.splitlines()
                             if line.startswith("#"))
        [line] = [x for x in lines if x.split()[:1] == [path.stem]]
        name, runs, sources, description = line.split(None, 3)
        assert int(runs) == len(_load_yaml(text))
        assert int(sources) >= 1
        assert description == first_comment


def test_describe_counts_runs_and_sources(tmp_path):
    p = tmp_path / "lab.yaml"
    p.write_text("# Our cluster's runs.\n# more text\n- id: a\n  source: Lab notes, run 1\n"
                 "- id: b\n  source: Lab notes, run 2\n- id: c\n  source: A paper (Table 1)\n")
    assert shipped.describe(str(p)) == shipped.RunsSet("lab", str(p), "Our cluster's runs.",
                                                       3, 2)


def test_a_set_is_named_without_a_path(run_validate):
    code, by_name, err = run_validate("validate", "public", "--only", "nemo2407_llama3*")
    assert code == 0, err
    code, by_path, _ = run_validate("validate", str(ROOT / "runs" / "public.yaml"), "--only",
                                    "nemo2407_llama3*")
    assert by_name == by_path and "nemo2407_llama3_8b_8gpu_gbs128" in by_name


def test_an_unknown_set_name_says_what_ships(run_validate):
    code, out, err = run_validate("validate", "publik")
    assert code == 2
    assert err == ("error: runs file 'publik' does not exist and is not a shipped set (did you "
                   f"mean 'public'?); give a path, or one of {', '.join(p.stem for p in SHIPPED)}"
                   " (dlformula validate --list)\n")


def test_no_runs_argument(run_validate):
    code, out, err = run_validate("validate")
    assert code == 2 and "dlformula validate --list" in err


@pytest.mark.parametrize("name", [p.stem for p in SHIPPED])
def test_every_shipped_run_is_predicted_or_skipped_for_a_stated_reason(reports, name):
    """At most 3 runs of a file skipped, each for a true reason: no target, or no node."""
    report = reports[name]
    assert report["errors"] == []
    assert len(report["rows"]) == len(_load_yaml((ROOT / "runs" / f"{name}.yaml").read_text()))
    skipped = [r for r in report["rows"] if "skipped" in r]
    assert len(skipped) <= 3, skipped
    for r in skipped:
        assert SKIP_REASONS.match(r["skipped"]), r
    for r in report["rows"]:
        for value in r.get("predicted", {}).values():
            assert math.isfinite(value) and value > 0


@pytest.mark.parametrize("name", [p.stem for p in SHIPPED])
def test_show_round_trips_through_eval_for_every_shipped_run(engine, reports, tmp_path, name,
                                                           monkeypatch):
    """`validate --show ID` is a config `dlformula eval` accepts unchanged, and evaluates to
    the prediction validate makes -- for every run of every shipped file."""
    from dlformula.validation import show as show_module

    path = str(ROOT / "runs" / f"{name}.yaml")
    # show() reads the whole runs file for the one run it shows (what `--show` needs once):
    # here the file is read once for all of its runs (153 reads of one file took 2 s).
    rows = show_module.load_runs(path, [])
    monkeypatch.setattr(show_module, "load_runs",
                        lambda p, errors: rows if p == path else pytest.fail(p))
    checked = 0
    for r in reports[name]["rows"]:
        if "skipped" in r:
            continue
        config = tmp_path / f"{checked}.yaml"
        config.write_text(show(engine, path, r["id"]))
        result = engine.evaluate(str(config))
        for key, (quantity, factor, _) in v.TARGETS.items():
            if key in r["predicted"]:
                assert float(result[quantity]) * factor == pytest.approx(r["predicted"][key],
                                                                         rel=1e-12), r["id"]
        checked += 1
    assert checked >= len(reports[name]["rows"]) - 3


def test_show_on_the_command_line(run_validate, tmp_path):
    code, out, err = run_validate("validate", "public", "--show", "nemo2407_gpt3_175b_128gpu*")
    assert code == 0, err
    assert out.startswith("# Run 'nemo2407_gpt3_175b_128gpu_gbs256' of ")
    assert "\n# assumptions:\n" in out and "\nmodel:\n" in out
    config = tmp_path / "run.yaml"
    config.write_text(out)
    code, brief, err = run_validate("eval", str(config), "--only", "step_time", "--format",
                                    "json")
    assert code == 0, err
    [predicted] = re.findall(r"# step_time_s: predicted ([\d.e+-]+)", out)
    import json

    step = json.loads(brief)["quantities"]["step_time"]["value"]
    assert float(predicted) == pytest.approx(step, rel=1e-3)


def test_show_refuses_an_ambiguous_or_unknown_id(run_validate):
    code, _, err = run_validate("validate", "public", "--show", "nemo*")
    assert code == 2 and "matches 12 runs" in err
    code, _, err = run_validate("validate", "public", "--show", "no-such-run")
    assert code == 2 and err.startswith("error: --show 'no-such-run' matches no run id in ")


DOC_COMMAND = re.compile(r"^\$ dlformula (validate[^\n#]*)", re.M)


def test_every_validate_command_in_the_docs_runs_from_an_install(run_validate, monkeypatch,
                                                                tmp_path):
    """Every `$ dlformula validate ...` in docs/ works for someone who has only `pip install
    dlformula`: run from an empty folder, so no path of the checkout can help."""
    monkeypatch.chdir(tmp_path)
    commands = [m for doc in (ROOT / "docs").glob("*.md")
                for m in DOC_COMMAND.findall(doc.read_text())]
    assert len(commands) >= 4
    for command in commands:
        args = command.split(">")[0].split()
        code, out, err = run_validate(*[a.strip("'") for a in args])
        assert code == 0, (command, err)
        assert out
