"""Shared fixtures. Tests never touch the user's cache: each session gets its own."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
EXAMPLES = ROOT / "examples"

_cache = tempfile.mkdtemp(prefix="dlformula-test-cache-")
os.environ["DLFORMULA_CACHE_DIR"] = _cache
# Tests control plugin loading: no installed third-party plugin or plugin folder sneaks in.
os.environ["DLFORMULA_LOAD_PLUGINS"] = ""
os.environ.pop("DLFORMULA_PLUGINS", None)


def _tested_package() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("dlformula")
    return Path(spec.origin).resolve().parent if spec and spec.origin else None


def pytest_configure(config) -> None:
    import gc

    gc.set_threshold(50_000, 20, 20)  # from the start (collection imports sympy and friends)


def pytest_sessionstart(session) -> None:
    """From a checkout the suite tests the checkout (the README's editable install): a regular
    install would test a copy, and an edit, even a syntax error, would pass unseen.
    DLFORMULA_TEST_INSTALLED=1 tests an installed copy on purpose (tests that read the
    checkout's own files compare contents, never paths)."""
    where = _tested_package()
    if where != ROOT / "engine" and os.environ.get("DLFORMULA_TEST_INSTALLED") != "1":
        pytest.exit(f"error: the tests would run against {where or 'no installed dlformula'}, "
                    f"not this checkout ({ROOT}): install it editable with "
                    "pip install -e '.[test]' (or set DLFORMULA_TEST_INSTALLED=1 to test an "
                    "installed copy on purpose)", returncode=4)


def pytest_report_header(config) -> str:
    return f"dlformula: {_tested_package()}"


def pytest_collection_modifyitems(session, config, items) -> None:
    """The test files that wait for a background job (tests/background.py) run last, in their
    own order, so that the job has the rest of the session to finish on the other core."""
    import background

    late = {item.path for item in items if background.wanted(item.fixturenames)}
    items[:] = sorted(items, key=lambda item: item.path in late)  # stable: order kept within


def pytest_collection_finish(session) -> None:
    import background

    if session.config.option.collectonly:
        return
    background.start(name for item in session.items for name in item.fixturenames)
    quiet_collector()


def quiet_collector() -> None:
    """Python's cyclic garbage collector ran some 9,000 times over the session's millions of
    sympy, openpyxl and NumPy objects, 9 of its 50 seconds: what is loaded by now stays (frozen,
    never scanned again) and the youngest generation is collected after 50,000 allocations, not
    700. What the tests check is unchanged; gc.collect() still collects everything."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def pytest_sessionfinish(session, exitstatus) -> None:
    import background

    background.stop()


@pytest.fixture(scope="session")
def engine():
    from dlformula import Engine

    return Engine()


@pytest.fixture(scope="session")
def gpt3(engine):
    return engine.evaluate(str(EXAMPLES / "gpt3-175b.yaml"))


@pytest.fixture
def run():
    """Run the CLI in-process: returns (exit code, stdout, stderr)."""

    def _run(*args: str) -> tuple[int, str, str]:
        import contextlib
        import io

        from dlformula.cli import main

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
        return code, out.getvalue(), err.getvalue()

    return _run


def write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def load_script(path: Path):
    """Import a repository script that is not installed (bench/*.py, docs/update_validation.py)
    as a module, so a test can call its functions."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
