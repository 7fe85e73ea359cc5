"""The generated code is cached: a warm eval needs neither sympy nor networkx."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import EXAMPLES

EXAMPLE = str(EXAMPLES / "gpt3-175b.yaml")
PROBE = (
    "import sys; from dlformula.cli import main; "
    f"main(['eval', {EXAMPLE!r}, '--format', 'json', '--only', 'step_time']); "
    "print([m for m in ('sympy', 'networkx', 'numpy', 'openpyxl', 'dlformula.loader') "
    "if m in sys.modules], file=sys.stderr)"
)


def probe(cache_dir):
    env = dict(os.environ, DLFORMULA_CACHE_DIR=str(cache_dir))
    res = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stderr.strip().splitlines()[-1]


def test_warm_eval_imports_no_sympy(tmp_path):
    assert "sympy" in probe(tmp_path)  # cold: builds the code
    assert probe(tmp_path) == "[]"  # warm: nothing heavy


def test_cache_follows_formula_changes(tmp_path, monkeypatch):
    from dlformula.core import Engine
    from dlformula.resources import DataFolder, builtin_folders

    monkeypatch.setenv("DLFORMULA_CACHE_DIR", str(tmp_path / "cache"))
    extra = tmp_path / "formulas"
    extra.mkdir()
    (extra / "x.yaml").write_text(
        "quantities:\n  double_step:\n    expr: 2 * step_time\n    unit: s\n"
        "    doc: d\n    source: s\n")
    folders = builtin_folders() + [DataFolder("formulas", extra, "test")]
    first = Engine(folders=folders).model
    assert "double_step" in first.quantities
    (extra / "x.yaml").write_text(
        "quantities:\n  triple_step:\n    expr: 3 * step_time\n    unit: s\n"
        "    doc: d\n    source: s\n")
    second = Engine(folders=folders).model
    assert "triple_step" in second.quantities and "double_step" not in second.quantities
    assert len(list((tmp_path / "cache").glob("model-*.marshal"))) == 2


def test_corrupt_cache_is_rebuilt(tmp_path, monkeypatch):
    from dlformula.core import Engine
    from dlformula.model import cache_path

    monkeypatch.setenv("DLFORMULA_CACHE_DIR", str(tmp_path))
    eng = Engine()
    path = cache_path(eng.digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not marshal data")
    assert "step_time" in Engine().model.quantities
