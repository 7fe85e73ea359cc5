"""How far predictions move when the runs leave a knob out.

A source the project has never used often prints the layout but not the micro-batch, the
recompute setting or the interleaving factor; the mapping then takes the published recipe's
value or the best feasible one (docs/validation.md, How a run becomes a config). This deletes
one field from every shipped run in turn, maps and predicts them again with the shipped
figures, and prints the median / p90 |step-time error| as stated and as stripped, with the
runs that moved most. Run: python bench/omitted_knobs.py [FIELD ...]
(fields as section.key of the runs files; default: the four below).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import yaml

from dlformula.core import Engine
from dlformula.validation.fit import collect, summary
from dlformula.validation.shipped import shipped_paths

FIELDS = ["batch.micro_batch", "parallel.recompute", "parallel.vpp", "parallel.zero"]


def errors(engine: Engine, files: list[str]) -> dict[tuple[str, str], float]:
    return {(os.path.basename(r.file), r.id):
            float(engine.model.evaluate(r.values)["step_time"]) / r.target - 1
            for r in collect(engine, files)}


def stripped_files(field: str, folder: str) -> list[str]:
    section, key = field.split(".", 1)
    out = []
    for path in shipped_paths().values():
        with open(path, encoding="utf-8") as f:
            rows = yaml.safe_load(f)
        for row in rows:
            block = row.get(section) if isinstance(row, dict) else None
            if isinstance(block, dict):
                block.pop(key, None)
        target = os.path.join(folder, os.path.basename(path))
        with open(target, "w", encoding="utf-8") as f:
            yaml.safe_dump(rows, f, sort_keys=False)
        out.append(target)
    return out


def main(fields: list[str]) -> None:
    start = time.perf_counter()
    engine = Engine()
    stated = errors(engine, list(shipped_paths().values()))
    print(f"{'field left out':22} {'runs':>5}  {'as stated':>15}  {'left out':>15}  moved > 2 pts")
    for field in fields:
        with tempfile.TemporaryDirectory() as folder:
            left = errors(engine, stripped_files(field, folder))
        common = [k for k in left if k in stated]
        a = summary([stated[k] for k in common])
        b = summary([left[k] for k in common])
        moved = sorted((k for k in common if abs(left[k] - stated[k]) > 0.02),
                       key=lambda k: abs(left[k]) - abs(stated[k]), reverse=True)
        print(f"{field:22} {len(common):5}  {a['median']:6.1%} / {a['p90']:5.1%}"
              f"  {b['median']:6.1%} / {b['p90']:5.1%}  {len(moved)}")
        for k in moved[:4]:
            print(f"    {k[1][:52]:52} {stated[k]:+7.1%} -> {left[k]:+7.1%}")
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fields", nargs="*", metavar="FIELD",
                        help=f"section.key of the runs files (default: {' '.join(FIELDS)})")
    fields = parser.parse_args().fields or FIELDS
    bad = [f for f in fields if f.count(".") != 1 or not all(f.split("."))]
    if bad:
        parser.error(f"{', '.join(bad)}: give each field as section.key, e.g. batch.micro_batch")
    main(fields)
