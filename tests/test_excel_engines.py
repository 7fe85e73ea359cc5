"""A second, independent spreadsheet engine: the `formulas` package (PyPI) recalculates an
exported workbook with a handful of configs written into its input cells, and every named cell
must equal `dlformula eval` within 1e-9 relative; its status must say "all pass" (or name the
engine's first warning) for valid configs and FAIL for a pasted value the engine refuses.
LibreOffice, the first engine, is in tests/test_excel.py; bench/workbook_agreement.py runs both
over hundreds of random configs.

Parsing the workbook and recalculating it take the `formulas` package some 15 seconds: that
runs as a background job (tests/background.py) while the other tests run; the checks are here.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

import background
from dlformula.core import Engine
from dlformula.excel import export

ROOT = Path(__file__).resolve().parent.parent
GPT3 = str(ROOT / "examples" / "gpt3-175b.yaml")
CONFIGS = [  # planner edits of the exported gpt3 workbook: layout, node, ZeRO, precision, ...
    [],
    ["parallelism.tp=4", "parallelism.dp=32", "training.recompute=full",
     "hardware.node=h100-sxm", "parallelism.zero=3", "training.precision=fp8"],
    ["hardware.gpus=512", "parallelism.dp=8", "parallelism.vpp=2", "model.tied_embeddings=true",
     "training.flash_attention=false", "hardware.node=mi300x"],
    ["parallelism.pp=4", "parallelism.dp=32", "training.recompute=none", "parallelism.sp=false",
     "parallelism.zero=0", "training.dropout=true", "training.micro_batch=4"],  # no fit
]
# Values pasted into the input cells of the gpt3 config (input name or hardware.node, value)
# and the check that must fail. (LibreOffice checks the messages of a blank node and a pasted
# micro_batch = 1.5.)
PASTED = [("zero", 4, "parallelism.zero"),
          ("hardware.node", "h100", "hardware.node"),
          ("micro_batch", None, "training.micro_batch"),
          ("layers", "96 layers", "model.layers"),
          ("glu", "yes", "model.glu"),
          ("recompute", "everything", "training.recompute")]


@background.job("formulas_recalculated")
def recalculate_with_formulas() -> dict[str, Any] | None:
    """The background job: the gpt3 workbook parsed by `formulas`, recalculated with each of
    CONFIGS and with each PASTED value; None without the package."""
    import shutil
    import tempfile

    from dlformula.excel_recalc import FormulasBook, formulas_package

    try:
        formulas_package()
    except ImportError:
        return None
    engine = Engine()
    with tempfile.TemporaryDirectory(prefix="dlf-formulas-test-") as folder:
        path = str(Path(folder) / "plan.xlsx")
        fb = FormulasBook(path, export(engine, GPT3, path), engine.model)
    try:
        config = engine.evaluate(GPT3).config
        return {"outputs": fb.outputs,
                "configs": [fb.evaluate(engine.evaluate(GPT3, sets).config)
                            for sets in CONFIGS],
                "pasted": [fb.evaluate(config, {name: value})["status"]
                           for name, value, _ in PASTED]}
    finally:
        shutil.rmtree(fb.dir, ignore_errors=True)  # its trimmed copy of the workbook


@pytest.fixture(scope="module")
def formulas_recalculated() -> dict[str, Any]:
    got = background.result("formulas_recalculated")
    if got is None:
        if os.environ.get("CI"):
            pytest.fail("the formulas package is missing: pip install '.[test]'")
        pytest.skip("the formulas package is not installed: pip install formulas")
    return got


def test_formulas_package_recalculates_configs_to_the_engines_numbers(
        engine: Engine, formulas_recalculated: dict[str, Any]) -> None:
    bad, statuses = [], []
    assert len(formulas_recalculated["configs"]) == len(CONFIGS)
    for sets, got in zip(CONFIGS, formulas_recalculated["configs"]):
        result = engine.evaluate(GPT3, sets)
        for name in formulas_recalculated["outputs"]:
            v, want = got[name], result.values[name]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isclose(
                    v, want, rel_tol=1e-9, abs_tol=1e-300):
                bad.append(f"{sets}: {name} = {v!r} in formulas, {want!r} in the engine")
        warnings = result.model.warnings(result.values)
        statuses.append(got["status"])
        if warnings:
            assert got["status"].startswith("warning ("), (sets, got["status"])
        else:
            assert got["status"] == "all pass", (sets, got["status"])
    assert not bad, "\n".join(bad[:20])
    assert len(set(statuses)) > 1  # the configs differ in what they warn about
    assert len(formulas_recalculated["outputs"]) > 400  # every named cell was compared


def test_formulas_package_fails_a_pasted_value_the_engine_refuses(
        formulas_recalculated: dict[str, Any]) -> None:
    statuses = formulas_recalculated["pasted"]
    assert len(statuses) == len(PASTED)
    for (name, value, check), status in zip(PASTED, statuses):
        assert status.startswith(f"FAIL ({check})"), (name, value, status)
