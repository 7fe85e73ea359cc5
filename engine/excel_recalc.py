"""Recalculate an exported workbook with a second, independent spreadsheet engine: the
`formulas` package (PyPI; `pip install formulas`, in the test extras), for the tests and
bench/workbook_agreement.py. LibreOffice is the first engine (tests/test_excel.py).

    book = FormulasBook(path, info)         # parse the workbook once (a few seconds)
    values = book.evaluate(config, result)  # set its input cells to a config's, recalculate

`evaluate` writes a config's inputs into the workbook's input cells (the yellow value cells,
the Choose drop-downs and the node) as a planner would, and returns every named cell and the
`status` text. Parsing is most of the cost, so one parsed book serves many configs of the same
layout (configs that change inputs, not which figures the config sets itself).

The Readable column and the Checks messages (display text) are left out of the parsed copy:
they feed no named cell, and leaving them out cuts parsing by three quarters. LibreOffice
recalculates them in the tests.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from typing import Any

DISPLAY_ONLY = ("Readable", "Message")  # column titles of text no named cell reads

# LibreOffice, the first engine: a throw-away profile whose one setting makes Calc recalculate
# an .xlsx on load (its default keeps the cached values the export wrote).
RECALC_ALWAYS = """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry"
 xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="OOXMLRecalcMode" \
oor:op="fuse"><value>0</value></prop></item>
</oor:items>
"""


def soffice_convert_args(soffice: str, paths: list[Any], fmt: str, outdir: Any) -> tuple[
        list[str], str]:
    """(argv, profile folder) of one headless soffice run converting `paths` to `fmt` ("xlsx":
    load, recalculate, save; "pdf": print) into `outdir`, with a fresh profile that forces
    recalculation on load. The caller removes the profile folder when the run has ended."""
    from pathlib import Path

    profile = Path(tempfile.mkdtemp(prefix="dlf-lo-profile-"))
    (profile / "user").mkdir()
    (profile / "user" / "registrymodifications.xcu").write_text(RECALC_ALWAYS)
    argv = [soffice, "--headless", "--norestore", f"-env:UserInstallation={profile.as_uri()}",
            "--convert-to", fmt, "--outdir", str(outdir), *map(str, paths)]
    return argv, str(profile)


def formulas_package() -> Any:
    """The PyPI `formulas` package, not the `formulas/` data folder of a dlformula checkout
    that shadows it when Python runs from the checkout's root."""
    mod = sys.modules.get("formulas")
    if mod is not None and hasattr(mod, "ExcelModel"):
        return mod
    saved, saved_mod = list(sys.path), sys.modules.pop("formulas", None)

    def data_folder(entry: str) -> bool:  # a dlformula checkout: formulas/ without excel/
        folder = os.path.join(entry or ".", "formulas")
        return (os.path.isfile(os.path.join(folder, "__init__.py"))
                and not os.path.isdir(os.path.join(folder, "excel")))

    sys.path[:] = [p for p in sys.path if not data_folder(p)]
    try:
        return importlib.import_module("formulas")
    except ImportError:
        if saved_mod is not None:
            sys.modules["formulas"] = saved_mod
        raise
    finally:
        sys.path[:] = saved


class FormulasBook:
    """An exported workbook parsed by `formulas`, compiled from its input cells to its named
    cells and status."""

    def __init__(self, path: str, info: Any, model: Any) -> None:
        import openpyxl

        formulas = formulas_package()
        wb = openpyxl.load_workbook(path)
        for ws in wb.worksheets:
            titles = [c.value for c in ws[4]] if ws.max_row >= 4 else []
            for col, title in enumerate(titles, start=1):
                if title in DISPLAY_ONLY:
                    for r in range(5, ws.max_row + 1):
                        ws.cell(row=r, column=col).value = None
        self.dir = tempfile.mkdtemp(prefix="dlf-formulas-")
        name = "book.xlsx"
        trimmed = os.path.join(self.dir, name)
        wb.save(trimmed)
        self.info, self.model = info, model

        def key(sheet: str, cell: str) -> str:
            return f"'[{name}]{sheet.upper()}'!{cell}"

        self.inputs: list[tuple[str, str]] = []  # (input name or hardware.node, cell key)
        for n in model.inputs:
            sheet, cell = info.choices.get(n) or info.cells[n]
            v = wb[sheet][cell].value
            if not (isinstance(v, str) and v.startswith("=")):  # not a node lookup
                self.inputs.append((n, key(sheet, cell)))
        if info.node_cell:
            self.inputs.append(("hardware.node", key(*info.node_cell)))
        self.outputs = list(info.cells)
        status = wb.defined_names.get("status")
        out_keys = [key(*info.cells[n]) for n in self.outputs]
        if status is not None:
            sheet, ref = status.attr_text.split("!")
            out_keys.append(key(sheet.strip("'"), ref.replace("$", "")))
        xl = formulas.ExcelModel().loads(trimmed).finish()
        self.fn = xl.compile(inputs=[k for _, k in self.inputs], outputs=out_keys)
        self.has_status = status is not None

    def evaluate(self, config: Any, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """Named cell values (and 'status') with the inputs of `config` (a resolved Config);
        `overrides` writes raw cell values by input name, as a paste would."""
        args = []
        for n, _ in self.inputs:
            if overrides and n in overrides:
                args.append(overrides[n])
            elif n == "hardware.node":
                args.append(config.node.id if config.node else None)
            else:
                d = self.model.inputs[n]
                v = config.values[n]
                if d.choices or d.domain.kind == "boolean":
                    v = config.labels.get(n, d.label(v))
                args.append(v)
        out = self.fn(*args)
        names = [*self.outputs, "status"] if self.has_status else self.outputs
        return {n: _scalar(o) for n, o in zip(names, out, strict=True)}


def _scalar(o: Any) -> Any:
    v = getattr(o, "value", o)
    try:
        v = v[0, 0]
    except (TypeError, IndexError, KeyError):
        pass
    if hasattr(v, "item"):  # NumPy scalar
        v = v.item()
    return v


def random_sets(rng: Any, nodes: list[str]) -> list[str]:
    """A random planner edit of a base config as --set items (layout, node, precision,
    recompute, ...), for the workbook agreement checks (tests and bench/workbook_agreement.py).
    The engine may refuse it: callers draw again."""
    tp, pp, dp, cp = (rng.choice(v) for v in ([1, 2, 4, 8], [1, 2, 4, 8],
                                              [1, 2, 4, 8, 16, 32], [1, 1, 2]))
    return [f"hardware.node={rng.choice(nodes)}", f"hardware.gpus={tp * pp * dp * cp}",
            f"parallelism.tp={tp}", f"parallelism.pp={pp}", f"parallelism.dp={dp}",
            f"parallelism.cp={cp}", f"parallelism.vpp={rng.choice([1, 1, 2, 3])}",
            f"parallelism.zero={rng.randint(0, 3)}",
            f"parallelism.sp={rng.choice(['true', 'false'])}",
            f"parallelism.tp_comm_overlap={rng.choice([0, 0.3, 0.75])}",
            f"parallelism.overlap_grad_reduce={rng.choice(['true', 'false'])}",
            f"training.micro_batch={rng.choice([1, 2, 4])}",
            f"training.recompute={rng.choice(['none', 'selective', 'full'])}",
            f"training.precision={rng.choice(['bf16', 'bf16', 'fp16', 'fp8', 'tf32'])}",
            f"training.flash_attention={rng.choice(['true', 'true', 'false'])}",
            f"training.dropout={rng.choice(['true', 'false'])}",
            f"model.tied_embeddings={rng.choice(['true', 'false'])}",
            f"model.norm={rng.choice(['rmsnorm', 'layernorm'])}",
            f"cost.pue={rng.choice([1, 1.2])}"]
