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
