"""Workbook = engine, over hundreds of random configs, in two independent spreadsheet engines.

    python bench/workbook_agreement.py            # 200 random configs (gpt3 and llama3 bases)
    python bench/workbook_agreement.py -n 400 --no-libreoffice

For each random valid config (node, tp/pp/dp/cp/vpp, ZeRO, recompute, precision, sequence
parallelism, overlap, flash attention, dropout, tied embeddings, norm, PUE):

- LibreOffice: the exported workbook recalculated by headless Calc (one soffice run per batch,
  a throw-away profile that forces recalculation on load);
- formulas (PyPI): one exported workbook per base config parsed once, the config's inputs
  written into its input cells, recalculated;

and every named cell compared with `dlformula eval`. Prints the worst relative difference per
engine, how many cells were compared, and whether the status said what the engine says ("all
pass", or the first warning). Asserts nothing; the suite's tests are tests/test_excel*.py.
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASES = [str(ROOT / "examples" / "gpt3-175b.yaml"), str(ROOT / "examples" / "llama3-70b.yaml")]


def random_configs(engine: Any, n: int, seed: int) -> list[tuple[str, list[str], Any]]:
    """`n` valid random configs: (base config, --set list, evaluated result)."""
    from dlformula.errors import DlfError
    from dlformula.excel_recalc import random_sets

    rng = random.Random(seed)
    nodes = engine.catalog.node_ids()
    out: list[tuple[str, list[str], Any]] = []
    while len(out) < n:
        base = BASES[len(out) % 2]
        sets = random_sets(rng, nodes)
        try:
            out.append((base, sets, engine.evaluate(base, sets)))
        except DlfError:
            continue
    return out


def expected_status(result: Any) -> str:
    warnings = result.model.warnings(result.values)
    return "warning" if warnings else "all pass"


class Worst:
    def __init__(self) -> None:
        self.rel, self.where, self.cells, self.bad, self.status_wrong = 0.0, "", 0, 0, 0

    def compare(self, label: str, name: str, got: Any, want: float) -> None:
        self.cells += 1
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            self.bad += 1
            self.where = self.where or f"{label}: {name} = {got!r}"
            return
        rel = abs(got - want) / abs(want) if want else (0.0 if got == 0 else math.inf)
        if rel > self.rel:
            self.rel, self.where = rel, f"{label}: {name} = {got!r}, eval {want!r}"

    def status(self, got: Any, result: Any) -> None:
        want = expected_status(result)
        if not (isinstance(got, str) and got.startswith(want)):
            self.status_wrong += 1

    def line(self, engine: str, configs: int, seconds: float) -> str:
        return (f"{engine}: {configs} configs, {self.cells} named cells in {seconds:.0f} s: worst "
                f"relative difference {self.rel:.2e} ({self.where or '-'}); non-numbers "
                f"{self.bad}; status not as the engine says: {self.status_wrong}")


def libreoffice(engine: Any, configs: list[tuple[str, list[str], Any]], tmp: Path,
                batch: int) -> str:
    import openpyxl

    from dlformula.excel import export
    from dlformula.excel_recalc import soffice_convert_args

    soffice = shutil.which("soffice") or shutil.which("libreoffice")
    if not soffice:
        return "LibreOffice: soffice not found (apt-get install libreoffice-calc-nogui); skipped"
    start, worst = time.perf_counter(), Worst()
    for lo in range(0, len(configs), batch):
        books = []
        for i, (base, sets, result) in enumerate(configs[lo:lo + batch], start=lo):
            path = tmp / f"{i:04d}.xlsx"
            books.append((path, export(engine, base, str(path), sets), result))
        outdir = tmp / "recalc"
        argv, profile = soffice_convert_args(soffice, [p for p, _, _ in books], "xlsx", outdir)
        subprocess.run(argv, check=True, capture_output=True, timeout=3600)
        shutil.rmtree(profile, ignore_errors=True)
        for path, info, result in books:
            wb = openpyxl.load_workbook(outdir / path.name, data_only=True)
            for name, (sheet, cell) in info.cells.items():
                worst.compare(path.stem, name, wb[sheet][cell].value, result.values[name])
            ref = wb.defined_names["status"].attr_text.split("!")
            worst.status(wb[ref[0].strip("'")][ref[1].replace("$", "")].value, result)
            path.unlink()
    line = worst.line("LibreOffice", len(configs), time.perf_counter() - start)
    if worst.where:
        i = int(worst.where.split(":")[0])
        line += f"\n  worst config: {configs[i][0]} --set " + " --set ".join(configs[i][1])
    return line


def formulas_engine(engine: Any, configs: list[tuple[str, list[str], Any]], tmp: Path) -> str:
    from dlformula.excel import export
    from dlformula.excel_recalc import FormulasBook, formulas_package

    try:
        formulas_package()
    except ImportError:
        return "formulas: the package is not installed (pip install formulas); skipped"
    start, worst, books = time.perf_counter(), Worst(), {}
    for base in BASES:
        path = tmp / f"{Path(base).stem}.xlsx"
        info = export(engine, base, str(path))
        books[base] = FormulasBook(str(path), info, engine.model)
    for i, (base, _, result) in enumerate(configs):
        got = books[base].evaluate(result.config)
        for name in books[base].outputs:
            worst.compare(f"config {i}", name, got[name], result.values[name])
        worst.status(got["status"], result)
    return worst.line("formulas", len(configs), time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200, help="random configs (default 200)")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--batch", type=int, default=50, help="workbooks per soffice run")
    parser.add_argument("--no-libreoffice", action="store_true")
    parser.add_argument("--no-formulas", action="store_true")
    args = parser.parse_args()
    from dlformula.core import Engine

    engine = Engine()
    configs = random_configs(engine, args.n, args.seed)
    print(f"{len(configs)} random valid configs over {', '.join(Path(b).name for b in BASES)}")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if not args.no_formulas:
            print(formulas_engine(engine, configs, tmp), flush=True)
        if not args.no_libreoffice:
            print(libreoffice(engine, configs, tmp, args.batch), flush=True)


if __name__ == "__main__":
    sys.exit(main())
