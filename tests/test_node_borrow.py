"""A node figure written `{from: NODE, source}` takes NODE's figure: one value per hardware
family, kept in one file; bad references get one line naming the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import ROOT, write
from dlformula.validation import fit

GPT3 = str(ROOT / "examples" / "gpt3-175b.yaml")
H100 = (ROOT / "hardware" / "h100-sxm.yaml").read_text(encoding="utf-8")


def _node(tmp_path: Path, spec_line: str) -> str:
    """A copy of the H100 SXM node file whose gemm_efficiency line is `spec_line`."""
    lines = [spec_line if line.startswith("  gemm_efficiency:") else line
             for line in H100.splitlines()]
    return write(tmp_path, "my-node.yaml", "\n".join(lines) + "\n")


def _line(path: str) -> int:
    text = Path(path).read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(text, 1) if line.startswith("  gemm_efficiency:"))


def test_a_borrowed_figure_is_the_other_nodes(engine, tmp_path):
    node = _node(tmp_path, '  gemm_efficiency: {from: a100-sxm4-80gb, source: "a test"}')
    mine = engine.evaluate(GPT3, {"hardware.node": node})
    a100 = engine.evaluate(GPT3, {"hardware.node": "a100-sxm4-80gb"})
    h100 = engine.evaluate(GPT3, {"hardware.node": "h100-sxm"})
    assert mine["gemm_efficiency"] == a100["gemm_efficiency"] != h100["gemm_efficiency"]
    assert mine["peak_flops_bf16"] == h100["peak_flops_bf16"]  # the rest is the file's own


@pytest.mark.parametrize(("spec", "message"), [
    ('{from: h100-sxn, source: "x"}',
     "spec 'gemm_efficiency' borrows from unknown node 'h100-sxn' (did you mean 'h100-sxm'?); "
     "`dlformula hardware` lists them"),
    ('{from: h100-sxm, value: 0.5, source: "x"}',
     "spec 'gemm_efficiency' takes either a value or 'from: NODE' (a node id), not both"),
    ('{from: h100-sxm, unit: "TFLOP/s", source: "x"}',
     "spec 'gemm_efficiency' is in 'TFLOP/s' but 'h100-sxm' gives it in '1'; drop the unit"),
    ('{from: h100-sxm}',
     "spec 'gemm_efficiency' needs a source: every hardware figure says where it comes from"),
])
def test_a_bad_borrow_names_its_line(run, tmp_path, spec, message):
    node = _node(tmp_path, f"  gemm_efficiency: {spec}")
    code, out, err = run("eval", GPT3, "--set", f"hardware.node={node}", "--brief")
    assert code != 0 and out == ""
    assert err.splitlines() == [f"error: {node}:{_line(node)}: {message}"]


def test_a_figure_a_node_lacks_cannot_be_borrowed(run, tmp_path):
    node = _node(tmp_path, '  gemm_efficiency: {value: 0.5, unit: "1", source: "x"}')
    node = write(tmp_path, "my-node.yaml", Path(node).read_text(encoding="utf-8").replace(
        "specs:\n", 'specs:\n  fp4_gemm_ratio: {from: a100-sxm4-80gb, source: "x"}\n', 1))
    code, _, err = run("eval", GPT3, "--set", f"hardware.node={node}", "--brief")
    assert code != 0
    assert "spec 'fp4_gemm_ratio' borrows from 'a100-sxm4-80gb', which has no " \
           "'fp4_gemm_ratio'; give a value instead" in err


def test_each_fitted_family_figure_has_one_value_in_one_file():
    # A refit writes one file per family: every other node of the family borrows the figure.
    spec = fit.spec()
    for family in spec.families.values():
        for key in [*family.grids, *family.ties]:
            name = key.split(".", 1)[1]
            holders = []
            for node in family.nodes:
                text = (ROOT / "hardware" / f"{node}.yaml").read_text(encoding="utf-8")
                figure = yaml.safe_load(text)["specs"].get(name, {})
                if "value" in figure:
                    holders.append(node)
            assert len(holders) == 1, (family.name, key, holders)


def test_a_borrow_that_comes_back_is_an_error(tmp_path):
    from dlformula.errors import DlfError
    from dlformula.resources import Catalog, DataFolder

    for me, other in (("x1", "x2"), ("x2", "x1")):
        write(tmp_path, f"{me}.yaml", "name: X\nvendor: V\nspecs:\n"
              f'  gemm_efficiency: {{from: {other}, source: "s"}}\n')
    with pytest.raises(DlfError) as exc:
        Catalog([DataFolder("hardware", tmp_path)]).node("x1")
    assert any("spec 'gemm_efficiency' borrows from 'x1', which borrows it back "
               "(x1 -> x2 -> x1); give one of them a value" in line
               for line in exc.value.lines())
