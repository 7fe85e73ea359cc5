"""The docs stay true: the README session is real output, every command and module is named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import background

# Not conftest.ROOT: this module is imported again in the background worker, which must not
# import conftest (tests/background.py).
ROOT = Path(__file__).resolve().parent.parent


def test_readme_session_is_current():
    res = subprocess.run([sys.executable, str(ROOT / "docs" / "update_readme.py"), "--check"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


@background.job("validation_page_check")
def check_validation_page() -> tuple[int, str]:
    """The background job: `python docs/update_validation.py --check` (the validation runs and
    the leave-one-source-out fit, a few seconds), run in the worker; (exit code, output)."""
    import contextlib
    import importlib.util
    import io

    spec = importlib.util.spec_from_file_location("update_validation",
                                                  ROOT / "docs" / "update_validation.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = io.StringIO()
    argv, sys.argv = sys.argv, ["update_validation.py", "--check"]
    try:
        with contextlib.redirect_stdout(out):
            code = script.main()
    finally:
        sys.argv = argv
    return code, out.getvalue()


@pytest.fixture
def validation_page_check():
    return background.result("validation_page_check")


def test_validation_page_figures_are_current(validation_page_check):
    code, out = validation_page_check
    assert code == 0, out


def test_readme_starts_with_two_commands():
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert block == ["pip install -e '.[test]' && dlformula eval examples/gpt3-175b.yaml",
                     "python -m pytest"]


def test_every_command_is_documented():
    from dlformula.cli import cli

    readme = (ROOT / "README.md").read_text()
    missing = [name for name in cli.commands if f"`dlformula {name}" not in readme]
    assert missing == []


def test_architecture_names_every_module():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    modules = sorted(p.name for p in (ROOT / "engine").glob("*.py") if p.name != "__init__.py")
    missing = [m for m in modules if m not in text]
    assert missing == []


def test_every_formula_has_doc_and_source(engine):
    fs = engine.formula_set
    for d in [*fs.quantities.values(), *fs.constants.values()]:
        assert d.doc and d.source, d.name
    for d in fs.inputs.values():
        assert d.doc, d.name


def test_every_hardware_figure_has_a_source(engine):
    for node_id in engine.catalog.node_ids():
        node = engine.catalog.node(node_id)
        assert node.specs, node_id
        assert all(s.source.strip() for s in node.specs.values()), node_id


def test_hardware_catalog_table_matches_the_node_files(engine):
    """docs/hardware.md's catalog table gives each node file's figures (fitted ones drift)."""
    columns = {"BF16 TFLOP/s": "peak_flops_bf16", "FP8 TFLOP/s": "peak_flops_fp8",
               "FP4 TFLOP/s": "peak_flops_fp4",
               "HBM TB/s": "hbm_bandwidth", "scale-up GB/s": "scaleup_bandwidth",
               "scale-out GB/s": "scaleout_bandwidth", "TDP W": "tdp",
               "USD/h": "price_per_gpu_hour", "GEMM eff.": "gemm_efficiency",
               "attn eff.": "attention_efficiency", "coll. eff.": "collective_efficiency"}
    lines = (ROOT / "docs" / "hardware.md").read_text(encoding="utf-8").splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| id |"))
    names = [c.strip() for c in lines[head].strip("|").split("|")]
    rows = {}
    for line in lines[head + 2:]:
        if not line.startswith("| `"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = dict(zip(names, cells))
    files = sorted((ROOT / "hardware").glob("*.yaml"))
    assert sorted(rows) == [f.stem for f in files]
    catalog = engine.catalog
    for f in files:
        specs = catalog.node(f.stem).specs  # borrowed figures (`from:`) resolved
        for column, key in columns.items():
            cell = rows[f.stem][column].rstrip("*†‡")
            shown = 0.0 if cell == "-" else float(cell)
            # Shown to 3-4 significant figures.
            value = float(specs[key].value if key in specs else 0)  # FP4: only where it exists
            assert shown == pytest.approx(value, rel=5e-3), (f.stem, column)
