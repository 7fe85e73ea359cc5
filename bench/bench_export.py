"""Benchmark `dlformula export`: how long a workbook takes, and how closely LibreOffice agrees.

    python bench/bench_export.py              # timings, then a LibreOffice recalculation check
    python bench/bench_export.py --no-recalc  # timings only

Prints figures; it asserts nothing (the proof tests are in tests/test_excel*.py). The goal for
the full model is 1.5 s per export with an empty cache, measured here as a fresh process
running the command, with an empty cache, after `dlformula eval` has compiled the model, and
warm. bench/workbook_agreement.py measures workbook = engine over hundreds of random configs.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = [ROOT / "examples" / "gpt3-175b.yaml", ROOT / "examples" / "llama3-70b.yaml"]
VARIANTS = [[], ["training.recompute=full", "parallelism.zero=3"],
            ["hardware.node=h100-sxm", "training.precision=fp8"],
            ["parallelism.sp=false", "training.flash_attention=false", "training.dropout=true"]]
# The command as a user runs it, registering `export` if the CLI does not have it yet.
RUN_CLI = ("import sys; from dlformula.cli import cli, main; "
           "from dlformula.cli_export import export; "
           "'export' in cli.commands or cli.add_command(export); sys.exit(main(sys.argv[1:]))")


def fresh_process(config: Path, out: Path, repeat: int) -> dict[str, float]:
    """Wall time of `dlformula export` as a user runs it, in a fresh process, with an empty
    cache, after `dlformula eval` compiled the model, and warm (median of `repeat`)."""
    def run(*args: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", RUN_CLI, *args], check=True, capture_output=True,
                       env=env)
        return time.perf_counter() - start

    export = ["export", str(config), "-o", str(out)]
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "DLFORMULA_CACHE_DIR": cache}
        empty = run(*export)
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "DLFORMULA_CACHE_DIR": cache}
        run("eval", str(config))
        first = run(*export)
        warm = statistics.median(run(*export) for _ in range(repeat))
    return {"empty cache": empty, "first export after eval": first, "warm": warm}


def in_process(config: Path, out: Path) -> dict[str, float]:
    """Stage timings without the cache of printed formulas: evaluate, build the sympy
    expressions, print them, lay out the workbook, save."""
    from dlformula.core import Engine
    from dlformula.excel import build_workbook
    from dlformula.excel_printer import excel_names, print_formulas

    t0 = time.perf_counter()
    engine = Engine()
    result = engine.evaluate(str(config))
    t1 = time.perf_counter()
    fs = engine.formula_set  # imports sympy on first use
    t2 = time.perf_counter()
    print_formulas(fs, excel_names(result.model.names())[0])
    t3 = time.perf_counter()
    wb, _ = build_workbook(engine, result)  # formula text from the cache by now
    t4 = time.perf_counter()
    wb.save(out)
    t5 = time.perf_counter()
    return {"evaluate": t1 - t0, "sympy expressions": t2 - t1, "print": t3 - t2,
            "lay out": t4 - t3, "save": t5 - t4}


def recalc_agreement(tmp: Path) -> None:
    soffice = shutil.which("soffice") or shutil.which("libreoffice")
    if not soffice:
        print("LibreOffice: soffice not found (apt-get install libreoffice-calc-nogui); skipped")
        return
    import openpyxl

    from dlformula.core import Engine
    from dlformula.excel import export

    engine = Engine()
    books = []
    for config in EXAMPLES:
        for i, sets in enumerate(VARIANTS):
            path = tmp / f"{config.stem}-{i}.xlsx"
            info = export(engine, str(config), str(path), sets)
            books.append((path, info, engine.evaluate(str(config), sets).values))
    profile = Path(tempfile.mkdtemp(prefix="dlf-bench-lo-"))
    outdir = tmp / "recalc"
    start = time.perf_counter()
    subprocess.run([soffice, "--headless", f"-env:UserInstallation={profile.as_uri()}",
                    "--convert-to", "xlsx", "--outdir", str(outdir),
                    *(str(p) for p, _, _ in books)], check=True, capture_output=True)
    seconds = time.perf_counter() - start
    shutil.rmtree(profile, ignore_errors=True)
    worst, cells, exact = 0.0, 0, 0
    for path, info, values in books:
        wb = openpyxl.load_workbook(outdir / path.name, data_only=True)
        for name, (sheet, cell) in info.cells.items():
            got, want = wb[sheet][cell].value, values[name]
            cells += 1
            if got == want:
                exact += 1
                continue
            rel = abs(got - want) / abs(want) if want else math.inf
            worst = max(worst, rel)
    print(f"LibreOffice recalculation of {len(books)} workbooks in one soffice run: "
          f"{seconds:.1f} s")
    print(f"  agreement: {cells} named cells, {exact} identical, largest relative difference "
          f"{worst:.2e} (LibreOffice stores 15 significant digits)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="fresh-process runs per config")
    parser.add_argument("--no-recalc", action="store_true", help="skip the LibreOffice check")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for config in EXAMPLES:
            out = tmp / f"{config.stem}.xlsx"
            times = fresh_process(config, out, args.repeat)
            stages = in_process(config, out)
            print(f"{config.name}: `dlformula export` in a fresh process: " + ", ".join(
                f"{k} {v:.2f} s" for k, v in times.items()) + f" (warm: median of {args.repeat});"
                f" workbook {out.stat().st_size / 1024:.0f} KiB")
            print("  in process: " + ", ".join(f"{k} {v * 1000:.0f} ms"
                                               for k, v in stages.items()))
        if not args.no_recalc:
            recalc_agreement(tmp)


if __name__ == "__main__":
    main()
