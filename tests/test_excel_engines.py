"""A second, independent spreadsheet engine: the `formulas` package (PyPI) recalculates an
exported workbook with a handful of configs written into its input cells, and every named cell
must equal `dlformula eval` within 1e-9 relative; its status must say "all pass" (or name the
engine's first warning) for valid configs and FAIL for a pasted value the engine refuses.
LibreOffice, the first engine, is in tests/test_excel.py; bench/workbook_agreement.py runs both
over hundreds of random configs.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

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


@pytest.fixture(scope="module")
def book(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from dlformula.excel_recalc import FormulasBook, formulas_package

    try:
        formulas_package()
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("the formulas package is missing: pip install '.[test]'")
        pytest.skip("the formulas package is not installed: pip install formulas")
    engine = Engine()
    path = tmp_path_factory.mktemp("formulas") / "plan.xlsx"
    info = export(engine, GPT3, str(path))
    return engine, FormulasBook(str(path), info, engine.model)


def test_formulas_package_recalculates_configs_to_the_engines_numbers(book: Any) -> None:
    engine, fb = book
    bad, statuses = [], []
    for sets in CONFIGS:
        result = engine.evaluate(GPT3, sets)
        got = fb.evaluate(result.config)
        for name in fb.outputs:
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


def test_formulas_package_fails_a_pasted_value_the_engine_refuses(book: Any) -> None:
    engine, fb = book
    config = engine.evaluate(GPT3).config
    # (LibreOffice checks the messages of a blank node and a pasted micro_batch = 1.5.)
    for name, value, check in [("zero", 4, "parallelism.zero"),
                               ("hardware.node", "h100", "hardware.node"),
                               ("micro_batch", None, "training.micro_batch"),
                               ("layers", "96 layers", "model.layers"),
                               ("glu", "yes", "model.glu"),
                               ("recompute", "everything", "training.recompute")]:
        status = fb.evaluate(config, {name: value})["status"]
        assert status.startswith(f"FAIL ({check})"), (name, value, status)
