"""Slow work no test's state feeds, started as the session starts, in another process: it runs
on the machine's other core while the other tests run, and the tests that need it run last.

Two jobs use it: LibreOffice recalculating (and printing) the exported workbooks
(tests/test_excel.py) and the `formulas` package recalculating one (tests/test_excel_engines.py).
A job computes and returns data (pickled back); the test's checks stay in the test.

    @background.job("libreoffice")        # started when a selected test uses this fixture
    def recalculate_books() -> dict: ...  # module level, runs in a fresh (spawned) interpreter

    @pytest.fixture(scope="module")
    def libreoffice():
        return background.result("libreoffice")  # waits; a job's error fails the test

conftest.py starts the jobs after collection and stops them when the session ends. A job's
module is imported again in the worker: it must not import conftest (which sets up the test
process). A worker has a cache folder of its own, removed when the job ends. A job never
started (a test that asks late) runs in the test process.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterable
from typing import Any

_JOBS: dict[str, tuple[str, str]] = {}  # fixture name -> (module, function)
_RUNNING: dict[str, tuple[Any, Any]] = {}  # fixture name -> (process, receiving end)
_DONE: dict[str, tuple[bool, Any]] = {}  # fixture name -> (ok, value or traceback text)


def job(fixture: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Register a module-level function as the job behind the fixture named `fixture`."""

    def register(fn: Callable[[], Any]) -> Callable[[], Any]:
        _JOBS[fixture] = (fn.__module__, fn.__qualname__)
        return fn

    return register


def wanted(fixturenames: Iterable[str]) -> set[str]:
    """The jobs among these fixture names."""
    return set(fixturenames) & set(_JOBS)


def _call(module: str, name: str) -> tuple[bool, Any]:
    try:
        return True, getattr(importlib.import_module(module), name)()
    except BaseException:  # noqa: B036 -- reported to the test, whatever it was
        return False, traceback.format_exc()


def _worker(module: str, name: str, conn: Any) -> None:
    # SIGTERM (stop(), or the session ending early) raises SystemExit, so that a job's
    # subprocesses are ended by their context managers rather than left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    gc.set_threshold(50_000, 20, 20)  # as in the test process (conftest.py)
    # Behind the tests in the queue for a core (LibreOffice inherits it): the tests that need
    # the job run last, and the others should not wait for it.
    if hasattr(os, "nice"):
        os.nice(10)
    # A cache folder of its own: the session's is the tests' (some compare its listing before
    # and after a command), and a job writing into it meanwhile made them fail.
    folder = tempfile.mkdtemp(prefix="dlformula-test-job-")
    os.environ["DLFORMULA_CACHE_DIR"] = folder
    printed = io.StringIO()  # shown with an error, else dropped (progress bars)
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            ok, value = _call(module, name)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    conn.send((ok, value if ok else f"{value}\n{printed.getvalue()}".rstrip()))
    conn.close()


def start(fixtures: Iterable[str]) -> None:
    """Start the jobs of these fixtures that are not running or done."""
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads
    for fixture in sorted(wanted(fixtures) - set(_RUNNING) - set(_DONE)):
        receive, send = ctx.Pipe(duplex=False)
        process = ctx.Process(target=_worker, args=(*_JOBS[fixture], send), daemon=True,
                              name=f"test job {fixture}")
        process.start()
        send.close()
        _RUNNING[fixture] = (process, receive)


def result(fixture: str) -> Any:
    """The job's value (waiting for it); its error, with the worker's traceback, as a failure."""
    if fixture not in _DONE:
        if fixture in _RUNNING:
            process, receive = _RUNNING.pop(fixture)
            gc.disable()  # unpickling a job's many small objects: the collector quadruples it
            try:
                _DONE[fixture] = receive.recv()
            except EOFError:
                process.join()
                _DONE[fixture] = (False, f"the worker process ended (exit code "
                                         f"{process.exitcode}) without an answer")
            finally:
                gc.enable()
            process.join()
            receive.close()
        else:
            _DONE[fixture] = _call(*_JOBS[fixture])
    ok, value = _DONE[fixture]
    if not ok:
        raise RuntimeError(f"the background job '{fixture}' failed:\n{value}")
    return value


def stop() -> None:
    """End the jobs still running (a session stopped early)."""
    for process, _ in _RUNNING.values():
        if process.is_alive():
            os.kill(process.pid, signal.SIGTERM)
    for process, receive in _RUNNING.values():
        process.join(timeout=10)
        receive.close()
    _RUNNING.clear()
