"""First predictions: each run's step-time error as it was first recorded, blind.

Before a new runs file can change the model, its rows are predicted once with the model of the
day and the output of `dlformula validate FILE --format json` is kept in bench/runs/blind/
(STEM.COMMIT.json; docs/validation.md, Blind records). Those errors are the honest measure of
transfer to a source the model has never seen: nothing was fitted or changed with the rows in
view. Leave-one-source-out refits the figures without a source, but the mechanisms it runs were
written with every source in view.

A run recorded more than once (a file recorded again after a fix, or a row carried into a later
file) counts at its first record. `ORDER` in the same folder lists the records oldest first,
one stem (STEM.COMMIT) per line; a record it does not list is an error, so a new record cannot
be left out of the figures silently.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

ORDER = "ORDER"
TARGET = "step_time_s"


class First(NamedTuple):
    error: float  # predicted / measured - 1, as first recorded
    record: str  # the record's stem (STEM.COMMIT)
    position: int  # the record's place in ORDER, 0 for the oldest


def records(folder: Path) -> list[str]:
    """The record stems in ORDER, oldest first; every *.json of the folder must be listed and
    every listed stem must have its .json."""
    order_path = folder / ORDER
    if not order_path.is_file():
        raise ValueError(f"{order_path}: missing; list the blind records oldest first, one "
                         "STEM.COMMIT per line")
    listed = [s.strip() for s in order_path.read_text().splitlines()
              if s.strip() and not s.lstrip().startswith("#")]
    seen: set[str] = set()
    for n, stem in enumerate(listed, 1):
        if stem in seen:
            raise ValueError(f"{order_path}:{n}: '{stem}' is listed twice")
        seen.add(stem)
        if not (folder / f"{stem}.json").is_file():
            raise ValueError(f"{order_path}:{n}: no record {stem}.json in {folder}")
    missing = sorted(p.stem for p in folder.glob("*.json") if p.stem not in seen)
    if missing:
        raise ValueError(f"{order_path}: records not listed: {', '.join(missing)}; add each "
                         "new record at the end (it is the newest)")
    return listed


def first_predictions(folder: Path) -> dict[str, First]:
    """Run id -> its step-time error at its first record (runs without a step-time target, or
    skipped by the model of the day, are left out)."""
    out: dict[str, First] = {}
    for position, stem in enumerate(records(folder)):
        path = folder / f"{stem}.json"
        try:
            report: Any = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: not a `dlformula validate --format json` report "
                             f"({exc})") from None
        rows = report.get("rows") if isinstance(report, dict) else None
        if not isinstance(rows, list):
            raise ValueError(f"{path}: no 'rows' list; a record is the output of "
                             "`dlformula validate FILE --format json`")
        for row in rows:
            error = (row.get("rel_error") or {}).get(TARGET) if isinstance(row, dict) else None
            if isinstance(error, (int, float)) and row.get("id") not in out:
                out[str(row["id"])] = First(float(error), stem, position)
    return out


def eras(firsts: dict[str, First], parts: int = 3) -> list[tuple[str, str, list[str]]]:
    """The runs split into `parts` spans of records by age, each with about the same number of
    runs: (first record, last record, run ids), oldest first."""
    ordered = sorted(firsts.items(), key=lambda item: item[1].position)
    size = len(ordered) / parts
    spans: list[tuple[str, str, list[str]]] = []
    start = 0
    for k in range(1, parts + 1):
        end = round(k * size)
        # a record's runs stay in one span: move the cut to the end of its record
        while 0 < end < len(ordered) and ordered[end][1].position == ordered[end - 1][1].position:
            end += 1
        if end > start:
            part = ordered[start:end]
            spans.append((part[0][1].record, part[-1][1].record, [i for i, _ in part]))
        start = end
    return spans
