"""The blind records: each run's first prediction, read in the order the records were made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlformula.validation.blind import eras, first_predictions, records

ROOT = Path(__file__).resolve().parent.parent


def _record(folder: Path, stem: str, errors: dict[str, float | None]) -> None:
    rows = [{"id": i, "rel_error": {} if e is None else {"step_time_s": e}}
            for i, e in errors.items()]
    (folder / f"{stem}.json").write_text(json.dumps({"rows": rows, "summary": {}}))


def test_a_run_recorded_twice_counts_at_its_first_record(tmp_path: Path) -> None:
    _record(tmp_path, "a.111", {"r1": 0.10, "r2": None})
    _record(tmp_path, "b.222", {"r1": -0.50, "r2": 0.20, "r3": 0.30})
    (tmp_path / "ORDER").write_text("# oldest first\na.111\nb.222\n")
    firsts = first_predictions(tmp_path)
    assert {i: (f.error, f.record) for i, f in firsts.items()} == {
        "r1": (0.10, "a.111"), "r2": (0.20, "b.222"), "r3": (0.30, "b.222")}
    # the other order makes b's figure for r1 the first one
    (tmp_path / "ORDER").write_text("b.222\na.111\n")
    assert first_predictions(tmp_path)["r1"].error == -0.50


@pytest.mark.parametrize("order, message", [
    ("a.111\n", "records not listed: b.222"),
    ("a.111\nb.222\nc.333\n", "ORDER:3: no record c.333.json"),
    ("a.111\nb.222\na.111\n", "ORDER:3: 'a.111' is listed twice"),
])
def test_order_must_list_every_record_once(tmp_path: Path, order: str, message: str) -> None:
    _record(tmp_path, "a.111", {"r1": 0.1})
    _record(tmp_path, "b.222", {"r2": 0.2})
    (tmp_path / "ORDER").write_text(order)
    with pytest.raises(ValueError, match=message):
        records(tmp_path)


def test_a_record_that_is_not_a_report_is_named(tmp_path: Path) -> None:
    (tmp_path / "a.111.json").write_text("")
    (tmp_path / "ORDER").write_text("a.111\n")
    with pytest.raises(ValueError, match=r"a\.111\.json: not a `dlformula validate"):
        first_predictions(tmp_path)


def test_eras_keep_each_record_whole_and_cover_every_run(tmp_path: Path) -> None:
    sizes = {"a.1": 5, "b.2": 1, "c.3": 4, "d.4": 2}
    for stem, n in sizes.items():
        _record(tmp_path, stem, {f"{stem}-{k}": 0.01 * k for k in range(n)})
    (tmp_path / "ORDER").write_text("\n".join(sizes) + "\n")
    spans = eras(first_predictions(tmp_path), parts=3)
    assert sum(len(ids) for _, _, ids in spans) == 12
    # 12 runs in thirds of 4: the first cut falls inside a.1's five runs and moves past them
    assert [(first, last, len(ids)) for first, last, ids in spans] == [
        ("a.1", "a.1", 5), ("b.2", "c.3", 5), ("d.4", "d.4", 2)]
    assert spans[1][2] == ["b.2-0", "c.3-0", "c.3-1", "c.3-2", "c.3-3"]


def test_the_shipped_records_are_all_listed_and_readable() -> None:
    folder = ROOT / "bench" / "runs" / "blind"
    firsts = first_predictions(folder)
    assert len(records(folder)) == len(list(folder.glob("*.json")))
    assert len(firsts) > 1000
    # the oldest records are the frozen model's first predictions of the first held-out sets
    assert records(folder)[0].endswith(".d51d018")
