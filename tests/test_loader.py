"""Load-time checks: every bad formula file gets one line naming file:line and the fix."""

from __future__ import annotations

import pytest

from conftest import DATA
from dlformula.errors import DlfError

BAD = "tests/data/bad"

CASES = {
    "yaml_syntax": [f"{BAD}/yaml_syntax.yaml:4: YAML syntax error: did not find expected key; "
                    "fix the indentation or quoting on this line"],
    "duplicate_key": [f"{BAD}/duplicate_key.yaml:7: duplicate key 'unit' (first defined on line "
                      "4); remove one of them"],
    "unknown_field": [
        f"{BAD}/unknown_field.yaml:6: unknown field 'sauce' in quantity 'twice_layers' (did you "
        "mean 'source'?); allowed fields: better, column, display, doc, expr, override, short, "
        "source, summary, title, unit",
        f"{BAD}/unknown_field.yaml:2: quantity 'twice_layers' has no 'source'; every definition "
        "needs a source"],
    "undefined_name": [f"{BAD}/undefined_name.yaml:3: quantity 'wide_layers' uses 'hiden', which "
                       "nothing defines (did you mean 'hidden'?); define it as an input or "
                       "quantity"],
    "redefined": [f"{BAD}/redefined.yaml:2: 'params_total' is already defined at "
                  "{model_yaml}; rename it, or add 'override: true' to replace the "
                  "earlier definition"],
    "cycle": [f"{BAD}/cycle.yaml:2: circular definition: alpha_time --> beta_time --> "
              "alpha_time; one of these must not depend on the others"],
    "unit_mismatch": [f"{BAD}/unit_mismatch.yaml:3: quantity 'bytes_plus_seconds': unit "
                      "mismatch: both sides of '+' are byte and s; convert one side so the "
                      "units agree"],
    # the main unit check: a declared unit against the dimension of the formula
    "declared_unit": [f"{BAD}/declared_unit.yaml:3: unit mismatch: quantity 'weights_time' is "
                      "declared in s (s) but its formula gives 1; fix the formula or the unit"],
    # how a definition is shown (display.py): each bad value at its line, with what to write
    "display_fields": [
        f"{BAD}/display_fields.yaml:6: input 'fudge': 'title' is ''; write one line of text of "
        "at most 40 characters, e.g. 'Memory per GPU' (or leave it out)",
        f"{BAD}/display_fields.yaml:6: input 'fudge': 'short' is 'a header far too long for a "
        "column'; write one line of text of at most 16 characters, e.g. 'memory/GPU' (or leave "
        "it out)",
        f"{BAD}/display_fields.yaml:17: quantity 'twice_layers': 'display' is 'percnt'; write "
        "percent (or leave it out)",
        f"{BAD}/display_fields.yaml:14: quantity 'twice_layers': 'title' is 'Twice\\nthe "
        "layers'; write one line of text of at most 40 characters, e.g. 'Memory per GPU' (or "
        "leave it out)",
        f"{BAD}/display_fields.yaml:15: quantity 'twice_layers': 'summary' is 'first'; write "
        "its rank among the key results: a whole number, 1 comes first (or leave it out)",
        f"{BAD}/display_fields.yaml:16: quantity 'twice_layers': 'column' is 0; write its rank "
        "among the result columns of search and sweep: a whole number, 1 comes first (or leave "
        "it out)",
        f"{BAD}/display_fields.yaml:1: a file-wide 'summary' list is no longer read: write "
        "'summary: N' (its rank) in each key result's own definition"],
    "bad_domain": [f"{BAD}/bad_domain.yaml:5: bad domain for input 'fudge': cannot read domain "
                   "'positive please'; write e.g. 'integer >= 1', 'number > 0', "
                   "'0 <= number <= 1', 'number', 'boolean', or give 'choices'"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_formula_file(run, name, monkeypatch, engine):
    monkeypatch.chdir(DATA.parent.parent)
    code, out, err = run("check", f"{BAD}/{name}.yaml")
    assert code == 1
    assert out == ""
    # Built-in files are named where they are installed (a checkout or site-packages).
    from dlformula.errors import display_path

    q = engine.model.quantities["params_total"]
    model_yaml = f"{display_path(q.path)}:{q.line}"
    assert err.splitlines() == [f"error: {line}".replace("{model_yaml}", model_yaml)
                                for line in CASES[name]]
    assert "Traceback" not in err


def test_all_errors_at_once(run, monkeypatch):
    monkeypatch.chdir(DATA.parent.parent)
    code, _, err = run("check", f"{BAD}/many_errors.yaml")
    assert code == 1
    lines = err.splitlines()
    assert len(lines) == 3
    assert "'first_bad' uses 'layerz'" in lines[0] and "did you mean 'layers'" in lines[0]
    assert ":13: quantity 'third_bad': attribute access" in lines[1]
    assert ":8: quantity 'second_bad': unit mismatch" in lines[2]


def test_unsafe_formula_refused_and_not_run(run, monkeypatch, tmp_path):
    monkeypatch.chdir(DATA.parent.parent)
    code, _, err = run("check", f"{BAD}/unsafe.yaml")
    assert code == 1
    assert "quantity 'evil': only calls to named functions are allowed" in err
    import os

    assert not os.path.exists("/tmp/dlformula-pwned")


def test_good_extra_file(run, monkeypatch):
    monkeypatch.chdir(DATA.parent.parent)
    code, out, err = run("check", "tests/data/good/extra.yaml")
    assert code == 0, err
    assert out.startswith("ok: ")


def test_override_replaces_and_is_remembered(tmp_path):
    from dlformula.loader import load_formula_set
    from dlformula.resources import builtin_folders, formula_sources
    from dlformula.sources import Source

    extra = Source("plugin/formulas/x.yaml", """
quantities:
  reserved_share:
    expr: reserved_memory / hbm_capacity
    unit: 1
    doc: share
    source: test
  optimizer_time:
    expr: 0 * step_time_floor
    unit: s
    doc: free optimizer
    source: test
    override: true
constants:
  step_time_floor: {value: 0, unit: s, doc: zero, source: test}
""", "plugin")
    fs = load_formula_set(formula_sources(builtin_folders()) + [extra])
    assert fs.quantities["optimizer_time"].path == "plugin/formulas/x.yaml"
    assert fs.overridden["optimizer_time"][0].path.endswith("compute.yaml")


def test_an_override_that_replaces_nothing_is_refused(tmp_path):
    """A misspelt override would add a new name and leave the intended formula in force."""
    from dlformula.loader import load_formula_set
    from dlformula.resources import builtin_folders, formula_sources
    from dlformula.sources import Source

    extra = Source("plugin/formulas/x.yaml", """
quantities:
  optimiser_time:
    expr: 0 * step_time
    unit: s
    doc: free optimizer
    source: test
    override: true
""", "plugin")
    with pytest.raises(DlfError) as info:
        load_formula_set(formula_sources(builtin_folders()) + [extra])
    assert info.value.path == "plugin/formulas/x.yaml" and info.value.line == 3
    assert "'optimiser_time' says 'override', but no definition" in str(info.value)
    assert "did you mean 'optimizer_time'?" in str(info.value)


def test_definitions_are_immutable(engine):
    q = engine.model.quantities["act_memory"]
    with pytest.raises(AttributeError):
        q.expr = "0"  # type: ignore[misc]
    assert q.path.endswith("memory.yaml") and q.line > 0


def test_a_group_is_shown_as_its_files_say_and_they_must_agree(run, engine, tmp_path):
    """A formula file's `title:` and `order:` say how its group (the file's name) is shown; a
    second file of the group may not say otherwise."""
    from dlformula.display import group_title, ordered_groups
    from dlformula.errors import display_path

    m = engine.model
    assert group_title(m, "comm") == "Communication" and group_title(m, "moe") == "MoE"
    assert group_title(m, "sublayers") == "Sublayers"  # no title: the name as a word
    assert ordered_groups(m, {"sublayers", "time", "model", "moe", "comm"}) == [
        "model", "comm", "time", "moe", "sublayers"]  # ranked first, then by name
    (tmp_path / "comm.yaml").write_text(
        "title: Comms\norder: soon\n\nquantities:\n  comm_twice:\n    expr: 2 * tp_comm_time\n"
        "    unit: s\n    doc: Twice.\n    source: test\n")
    code, _, err = run("check", str(tmp_path / "comm.yaml"))
    core = next(s.path for s in engine.sources if s.path.endswith("formulas/comm.yaml"))
    line = next(i for i, t in enumerate(open(core), 1) if t.startswith("title:"))
    assert code == 1
    assert err.splitlines() == [
        f"error: {tmp_path}/comm.yaml:2: the formula file: 'order' is 'soon'; write its rank "
        "among the groups: a whole number, 1 comes first (or leave it out)",
        f"error: {tmp_path}/comm.yaml:1: 'title: Comms' disagrees with 'title: Communication' "
        f"at {display_path(core)}:{line} for group 'comm'; give it in one of the group's files"]
