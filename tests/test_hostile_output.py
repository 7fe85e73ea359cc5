"""Issue 14: output files are written whole or not at all -- a full disk, a read-only folder,
Ctrl-C or SIGTERM leave the existing file untouched, no temporary file, and one error line."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import EXAMPLES

CFG = str(EXAMPLES / "gpt3-175b.yaml")
SWEEP = ("sweep", CFG, "--vary", "parallelism.tp=1,2,4,8", "--vary",
         "training.micro_batch=1,2")


@pytest.fixture
def full_disk():
    from dlformula.faults import full_disk

    with full_disk(300):
        yield


def _check_failed(code, err, folder, target, old=b"old contents"):
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot write"), err
    assert "Exception ignored" not in err and "Traceback" not in err, err
    assert "internal error" not in err
    assert target.read_bytes() == old
    assert sorted(p.name for p in folder.iterdir()) == [target.name]


@pytest.mark.parametrize("suffix", ["csv", "json", "xlsx"])
def test_sweep_on_a_full_disk(run, tmp_path, full_disk, suffix):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = out_dir / f"s.{suffix}"
    target.write_bytes(b"old contents")
    code, _, err = run(*SWEEP, "-o", str(target))
    _check_failed(code, err, out_dir, target)


@pytest.mark.parametrize("suffix", ["csv", "xlsx"])
def test_search_on_a_full_disk(run, tmp_path, full_disk, suffix):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = out_dir / f"s.{suffix}"
    target.write_bytes(b"old contents")
    # tp and pp fixed: 809 layouts are plenty to fill a disk (all 12,132 take 1.6 s in xlsx)
    code, _, err = run("search", CFG, "--gpus", "64", "--fix", "parallelism.tp=8", "--fix",
                       "parallelism.pp=8", "-o", str(target))
    _check_failed(code, err, out_dir, target)


def test_export_on_a_full_disk(run, tmp_path, full_disk):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = out_dir / "plan.xlsx"
    target.write_bytes(b"old contents")
    code, _, err = run("export", CFG, "-o", str(target))
    _check_failed(code, err, out_dir, target)


def test_plot_on_a_full_disk(run, tmp_path, full_disk):
    pytest.importorskip("matplotlib")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = out_dir / "p.png"
    target.write_bytes(b"old contents")
    code, _, err = run("plot", "memory", CFG, "-o", str(target))
    _check_failed(code, err, out_dir, target)


def test_read_only_folder(run, tmp_path, monkeypatch):
    out_dir = tmp_path / "ro"
    out_dir.mkdir()
    target = out_dir / "s.xlsx"
    target.write_bytes(b"old contents")
    os.chmod(out_dir, 0o555)
    try:
        if os.access(out_dir, os.W_OK):  # root ignores the mode: refuse the open instead
            from dlformula import atomic

            def refuse(path, binary):
                raise PermissionError(errno.EACCES, "Permission denied")

            monkeypatch.setattr(atomic, "_create", refuse)
        code, _, err = run(*SWEEP, "-o", str(target))
    finally:
        os.chmod(out_dir, 0o755)
    assert "Permission denied" in err
    _check_failed(code, err, out_dir, target)


def test_success_replaces_the_file_and_leaves_no_temporary(run, tmp_path):
    target = tmp_path / "s.csv"
    target.write_bytes(b"old contents")
    code, _, err = run(*SWEEP, "-o", str(target))
    assert code == 0, err
    assert target.read_text().startswith("tp,")
    assert [p.name for p in tmp_path.iterdir()] == ["s.csv"]


def test_interrupt_during_write_removes_the_temporary(tmp_path, monkeypatch):
    from dlformula.atomic import write_file

    target = tmp_path / "x.bin"
    target.write_bytes(b"old contents")

    def produce(fh):
        fh.write(b"partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_file(str(target), produce)
    assert target.read_bytes() == b"old contents"
    assert [p.name for p in tmp_path.iterdir()] == ["x.bin"]


def test_sigterm_during_a_sweep_leaves_no_partial_file(tmp_path):
    target = tmp_path / "big.csv"
    target.write_bytes(b"old contents")
    env = dict(os.environ, DLFORMULA_TUNE_MALLOC="0")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlformula", "sweep", CFG, "--workers", "1",
         "--vary", "parallelism.tp=1,2,4,8", "--vary", "training.micro_batch=1..64",
         "--vary", "training.global_batch=1536..400000", "-o", str(target)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    deadline = time.time() + 30
    while time.time() < deadline:  # wait until the temporary file is being written
        if any(p.name.endswith(".tmp") for p in tmp_path.iterdir()):
            break
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    assert target.read_bytes() == b"old contents"
    assert [p.name for p in tmp_path.iterdir()] == ["big.csv"]


@pytest.mark.parametrize("fmt", ["csv", "json", "xlsx"])
def test_tables_are_written_in_blocks_with_the_same_result(tmp_path, monkeypatch, fmt):
    """Table.write turns rows into text a block at a time (2 M search rows took 4 GB at once);
    the file is the one a single block gives."""
    import numpy as np

    from dlformula import table as tablemod

    t = tablemod.Table({"a": np.arange(10), "b": np.linspace(0, 1, 10), "c": np.arange(10) % 2},
                       decoders={"c": {0: "no", 1: "yes"}})
    whole, blocks = tmp_path / f"whole.{fmt}", tmp_path / f"blocks.{fmt}"
    t.write(str(whole))
    monkeypatch.setattr(tablemod, "WRITE_BLOCK", 3)
    t.write(str(blocks))
    if fmt == "xlsx":
        from openpyxl import load_workbook

        def cells(p):
            return [[c.value for c in row] for row in load_workbook(p).active.iter_rows()]

        assert cells(blocks) == cells(whole) and len(cells(whole)) == 11
    elif fmt == "json":
        import json

        assert json.loads(blocks.read_text()) == json.loads(whole.read_text())
        assert len(json.loads(blocks.read_text())) == 10
    else:  # the same numbers (a block of whole floats may print 1 rather than 1.0)
        import csv

        def rows(p):
            return [[float(x) if x[:1].isdigit() else x for x in r]
                    for r in list(csv.reader(p.open()))[1:]]

        assert rows(blocks) == rows(whole) and len(rows(whole)) == 10


def test_too_many_rows_for_a_sheet_refused_before_writing(tmp_path, monkeypatch):
    """2 M search rows to .xlsx spent minutes filling a sheet before the row limit refused
    them; now refused before the first row (and nothing is left behind)."""
    import numpy as np

    from dlformula import table as tablemod
    from dlformula.errors import UsageError

    monkeypatch.setattr(tablemod, "XLSX_MAX_ROWS", 5)
    monkeypatch.setattr(tablemod, "WRITE_BLOCK", 2)
    written = []
    real = tablemod._XlsxWriter.write
    monkeypatch.setattr(tablemod._XlsxWriter, "write",
                        lambda self, cols: written.append(1) or real(self, cols))
    t = tablemod.Table({"a": np.arange(10)})
    with pytest.raises(UsageError, match="more than 5 rows do not fit in an Excel sheet"):
        t.write(str(tmp_path / "t.xlsx"))
    assert written == [] and list(tmp_path.iterdir()) == []
