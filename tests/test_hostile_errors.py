"""Issue 14, internal errors the fuzz reached: each is now one `error:` line naming file:line
(exit 2 for input, 1 for model data), and `check` refuses every formula file `eval` would."""

from __future__ import annotations

import pytest

from conftest import EXAMPLES

CFG = str(EXAMPLES / "gpt3-175b.yaml")


def _clean(code: int, err: str, exit_code: int, expect: str) -> None:
    assert code == exit_code, err
    assert "internal error" not in err and "Traceback" not in err, err
    assert all(line.startswith("error: ") for line in err.strip().splitlines()), err
    assert expect in err, err


def _plugin(tmp_path, name: str, expr: str, unit: str = "1") -> str:
    folder = tmp_path / "plug"
    (folder / "formulas").mkdir(parents=True)
    (folder / "formulas" / "x.yaml").write_text(
        f"quantities:\n  {name}:\n    expr: {expr!r}\n    unit: {unit!r}\n"
        "    doc: d\n    source: s\n")
    return str(folder)


BAD_FORMULAS = [
    ("q", "layers % 0", "1", "divides by zero"),
    ("q", "layers // 0", "1", "infinite or undefined"),
    ("q", "1 / 0", "1", "infinite or undefined"),
    ("q", "0 ** -1", "1", "infinite or undefined"),
    ("q", "1e308 * 10", "1", "infinite or undefined"),
    ("q", "exp(1000)", "1", "beyond what a float can hold"),
    ("q", "layers", "GiB**64", "out of range"),
    ("lambda", "layers", "1", "reserved word"),
    ("None", "layers", "1", "reserved word"),
    ("q", "layers @ layers", "1", "'@' is not allowed"),
    ("q", "~layers", "1", "'~' is not allowed"),
]


def test_check_and_eval_both_refuse(run, tmp_path):
    """Each bad formula in its own file of one plugin: `check` of the files and `eval` with
    the plugin both name every file's problem (the loader reports all in one pass)."""
    folder = tmp_path / "plug"
    (folder / "formulas").mkdir(parents=True)
    files = []
    for i, (name, expr, unit, _) in enumerate(BAD_FORMULAS):
        name = name if name != "q" else f"q{i}"
        f = folder / "formulas" / f"bad{i}.yaml"
        f.write_text(f"quantities:\n  {name}:\n    expr: {expr!r}\n    unit: {unit!r}\n"
                     "    doc: d\n    source: s\n")
        files.append(str(f))
    code, _, err_check = run("check", *files)
    code2, _, err_eval = run("--plugin", str(folder), "eval", CFG, "--only", "params_total")
    for err, exit_code in ((err_check, code), (err_eval, code2)):
        assert exit_code == 1, err
        assert "internal error" not in err and "Traceback" not in err, err
        lines = err.strip().splitlines()
        assert all(line.startswith("error: ") for line in lines), err
        for i, (_, _, _, expect) in enumerate(BAD_FORMULAS):
            assert any(f"bad{i}.yaml:" in line and expect in line for line in lines), (i, err)


def test_a_good_plugin_formula_is_still_accepted(run, tmp_path):
    plugin = _plugin(tmp_path, "q", "layers * 2 + 1e300 * 10 / 10")
    code, _, err = run("check", plugin + "/formulas/x.yaml")
    assert code == 0, err
    code, out, err = run("--plugin", plugin, "eval", CFG, "--only", "q", "--format", "json")
    assert code == 0, err
    assert '"value": 1e+300' in out


def test_latin1_plugin_file_is_refused_by_check_and_eval(run, tmp_path):
    plugin = tmp_path / "lat"
    (plugin / "formulas").mkdir(parents=True)
    (plugin / "formulas" / "x.yaml").write_bytes(
        "quantities:\n  q:\n    expr: layers\n    unit: '1'\n    doc: caf\u00e9\n"
        "    source: s\n".encode("latin-1"))
    code, _, err = run("check", str(plugin / "formulas" / "x.yaml"))
    _clean(code, err, 2, "x.yaml:5: formula file is not UTF-8")
    code, _, err = run("--plugin", str(plugin), "eval", CFG)
    _clean(code, err, 1, "x.yaml:5: formula file is not UTF-8")


@pytest.mark.parametrize("value", ["hidden: ~", "hidden: [1, 2]", "hidden: {value: ~}"])
def test_bad_preset_value_does_not_break_presets(run, tmp_path, value):
    plugin = tmp_path / "pre"
    (plugin / "presets").mkdir(parents=True)
    (plugin / "presets" / "mine.yaml").write_text(
        f"name: Mine\nsource: s\nmodel:\n  layers: 2\n  {value}\n")
    code, _, err = run("--plugin", str(plugin), "presets")
    _clean(code, err, 1, "mine.yaml:5: 'model.hidden' must be a number")


def test_bad_published_params(run, tmp_path):
    plugin = tmp_path / "pre"
    (plugin / "presets").mkdir(parents=True)
    (plugin / "presets" / "mine.yaml").write_text(
        "name: Mine\nsource: s\npublished_params: {value: abc}\nmodel: {layers: 2}\n")
    code, _, err = run("--plugin", str(plugin), "presets")
    _clean(code, err, 1, "mine.yaml:3: 'published_params' must be a number")


@pytest.mark.parametrize("where,expect", [
    ("step_time @ step_time", "'@' is not allowed"),
    ("layers is layers", "'is' is not allowed"),
    ("layers ^ 2 > 1", "'^' is not allowed"),
])
def test_where_operators(run, where, expect):
    code, _, err = run("sweep", CFG, "--vary", "parallelism.tp=4,8", "--where", where)
    _clean(code, err, 2, expect)


@pytest.mark.parametrize("key", ["parallelism.tp", "parallelism.pp", "training.global_batch",
                                 "training.micro_batch", "model.layers"])
@pytest.mark.parametrize("value", ["9" * 400, "1e308"])
def test_huge_integers_are_refused_by_the_domain(run, key, value):
    code, _, err = run("eval", CFG, "--set", f"{key}={value}")
    _clean(code, err, 2, "is too large")


def test_huge_tokens_give_readable_output(run):
    code, out, err = run("eval", CFG, "--set", "training.tokens=1e300", "--only", "cost_usd")
    assert code == 0, err
    line = next(row for row in out.splitlines() if "cost_usd" in row)
    assert "e+" in line and len(line) < 120, line
    code, _, err = run("eval", CFG, "--set", "training.tokens=1e305")
    _clean(code, err, 2, "is too large")


def test_humanize_big_numbers():
    from dlformula.humanize import big_int_text, human

    assert human(10**400, "sequence")[0] == "1.000e+400"
    assert human(5.07e294, "USD") == ("5.07e+294", "USD")
    assert big_int_text(-123456) == "-1.234e+5"


def test_unit_powers_bounded():
    from dlformula.units import UnitSyntaxError, parse_unit

    assert parse_unit("byte**2").dim[0] == 2
    for text in ("GiB**64", "B**13", "B/" * 150 + "B"):
        with pytest.raises(UnitSyntaxError):
            parse_unit(text)
