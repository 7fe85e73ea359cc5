"""The on-disk cache (cache.py) and what is kept in it: the compiled model, found by the formula
files' stamps; a warm eval needs neither sympy nor networkx; one location, atomic writes,
corrupt entries rebuilt, old entries pruned."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT

EXAMPLE = str(EXAMPLES / "gpt3-175b.yaml")
PROBE = (
    "import sys; from dlformula.cli import main; "
    f"main(['eval', {EXAMPLE!r}, '--format', 'json', '--only', 'step_time']); "
    "print([m for m in ('sympy', 'networkx', 'numpy', 'openpyxl', 'dlformula.loader') "
    "if m in sys.modules], file=sys.stderr)"
)


def probe(cache_dir):
    env = dict(os.environ, DLFORMULA_CACHE_DIR=str(cache_dir))
    res = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stderr.strip().splitlines()[-1]


def test_warm_eval_imports_no_sympy(tmp_path):
    assert "sympy" in probe(tmp_path)  # cold: builds the code
    assert probe(tmp_path) == "[]"  # warm: nothing heavy


@pytest.fixture
def formulas(tmp_path, monkeypatch):
    """A formula folder of our own beside the built-in ones, and a fresh cache."""
    monkeypatch.setenv("DLFORMULA_CACHE_DIR", str(tmp_path / "cache"))
    extra = tmp_path / "formulas"
    extra.mkdir()
    (extra / "x.yaml").write_text(
        "quantities:\n  double_step:\n    expr: 2 * step_time\n    unit: s\n"
        "    doc: d\n    source: s\n")
    return extra


def _engine(extra):
    from dlformula.core import Engine
    from dlformula.resources import DataFolder, builtin_folders

    return Engine(folders=builtin_folders() + [DataFolder("formulas", extra, "test")])


@pytest.fixture
def compiles(monkeypatch):
    """How many times the model is compiled (rather than read from the cache)."""
    from dlformula import core

    calls = []
    real = core.compile_model

    def counted(fs):
        calls.append(1)
        return real(fs)

    monkeypatch.setattr(core, "compile_model", counted)
    return calls


def test_cache_follows_formula_changes(formulas, tmp_path, compiles):
    first = _engine(formulas).model
    assert "double_step" in first.quantities
    (formulas / "x.yaml").write_text(
        "quantities:\n  triple_step:\n    expr: 3 * step_time\n    unit: s\n"
        "    doc: d\n    source: s\n")
    second = _engine(formulas).model
    assert "triple_step" in second.quantities and "double_step" not in second.quantities
    assert len(list((tmp_path / "cache").glob("model-*.marshal"))) == 2
    assert len(compiles) == 2


def test_a_warm_start_reads_no_formula_file(formulas, compiles, monkeypatch):
    from dlformula import core

    assert _engine(formulas).model.quantities
    monkeypatch.setattr(core, "formula_sources", lambda folders: pytest.fail("read the texts"))
    assert "double_step" in _engine(formulas).model.quantities
    assert len(compiles) == 1


def test_a_touched_file_is_read_again_but_not_recompiled(formulas, compiles):
    assert _engine(formulas).model.quantities
    st = os.stat(formulas / "x.yaml")
    os.utime(formulas / "x.yaml", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert "double_step" in _engine(formulas).model.quantities
    assert len(compiles) == 1  # same content: the model came from the cache by its digest


def test_an_edit_that_keeps_the_size_is_noticed(formulas, compiles):
    assert _engine(formulas).model.quantities
    path = formulas / "x.yaml"
    text = path.read_text()
    st = os.stat(path)
    path.write_text(text.replace("2 * step_time", "3 * step_time"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # even within one clock tick
    model = _engine(formulas).model
    assert "3 * step_time" in model.quantities["double_step"].expr
    assert len(compiles) == 2


def test_a_new_formula_file_is_noticed(formulas, compiles):
    assert _engine(formulas).model.quantities
    (formulas / "y.yaml").write_text(
        "quantities:\n  half_step:\n    expr: step_time / 2\n    unit: s\n"
        "    doc: d\n    source: s\n")
    assert "half_step" in _engine(formulas).model.quantities


def test_corrupt_cache_is_rebuilt(formulas, compiles):
    from dlformula import cache
    from dlformula.model import content_entry, stamp_entry

    eng = _engine(formulas)
    assert eng.model.quantities
    Path(cache.entry_path(content_entry(eng.digest))).write_bytes(b"not marshal data")
    assert "step_time" in _engine(formulas).model.quantities
    assert len(compiles) == 2
    Path(cache.entry_path(stamp_entry(eng.stamp()))).write_bytes(b"\x00garbage")
    assert "step_time" in _engine(formulas).model.quantities


def test_the_model_round_trips_through_the_cache(engine):
    from dlformula.model import CompiledModel

    model = engine.model
    again = CompiledModel.unpack(model.pack())
    for table in ("inputs", "constants", "quantities"):
        assert getattr(again, table) == getattr(model, table)
    assert again.constraints == model.constraints and again.warning_defs == model.warning_defs
    assert again.order == model.order and again.deps == model.deps
    assert again.replaced == model.replaced and again.origins == model.origins
    assert all(type(d).__name__ == "InputDef" and type(d.domain).__name__ == "Domain"
               for d in again.inputs.values())


# -- the cache module ------------------------------------------------------------------------------
@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DLFORMULA_CACHE_DIR", str(tmp_path / "c"))
    return tmp_path / "c"


def test_the_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    from dlformula.cache import cache_dir

    monkeypatch.delenv("DLFORMULA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == str(tmp_path / "xdg" / "dlformula")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == str(tmp_path / "home" / ".cache" / "dlformula")
    monkeypatch.setenv("DLFORMULA_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == str(tmp_path / "mine")


def test_store_and_load_round_trip_and_corruption_is_a_miss(cache_dir):
    from dlformula import cache

    assert cache.load("nothing.marshal") is None
    assert cache.store("sub/x.marshal", {"a": (1, 2.5, "t")})
    assert cache.load("sub/x.marshal") == {"a": (1, 2.5, "t")}
    (cache_dir / "sub" / "x.marshal").write_bytes(b"\xff\x00 not marshal")
    assert cache.load("sub/x.marshal") is None
    assert not cache.store("y.marshal", object())  # not plain data: refused, nothing written
    assert not (cache_dir / "y.marshal").exists()


def test_a_failed_write_leaves_the_old_entry_and_no_temporary_file(cache_dir, monkeypatch):
    from dlformula import cache

    assert cache.write_bytes("e.bin", b"old")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    assert not cache.write_bytes("e.bin", b"new")
    assert (cache_dir / "e.bin").read_bytes() == b"old"
    assert sorted(p.name for p in cache_dir.iterdir()) == ["e.bin"]


def test_an_unwritable_cache_folder_is_not_an_error(tmp_path, monkeypatch):
    from dlformula import cache

    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("DLFORMULA_CACHE_DIR", str(blocker))
    assert not cache.store("x.marshal", 1)
    assert cache.load("x.marshal") is None


def test_prune_keeps_the_newest_entries(cache_dir):
    from dlformula import cache

    for i in range(7):
        cache.store(f"p/{i}.marshal", i)
        os.utime(cache_dir / "p" / f"{i}.marshal", ns=(i * 10**9, i * 10**9))
    cache.store("p/other.json", 0)
    assert cache.prune("p", 3) == 4
    assert sorted(p.name for p in (cache_dir / "p").iterdir()) == [
        "4.marshal", "5.marshal", "6.marshal", "other.json"]


def test_keys_depend_on_every_part_and_on_their_boundaries():
    from dlformula.cache import Key

    assert Key("a", "b").hex() == Key("a", "b").hex()
    assert Key("a", "b").hex() != Key("a", "c").hex()
    assert Key("ab", "c").hex() != Key("a", "bc").hex()
    assert Key("x\udcff").hex()  # text that does not encode strictly still has a key
    k = Key("base")
    assert k.copy().add("1").hex() != k.copy().add("2").hex()


def test_every_cache_lives_in_the_one_folder(cache_dir, run):
    code, _, err = run("eval", EXAMPLE, "--only", "step_time")
    assert code == 0, err
    kinds = {p.relative_to(cache_dir).parts[0].split("-")[0] for p in cache_dir.rglob("*")
             if p.is_file()}
    assert kinds == {"model", "models", "yaml"}  # the model, its stamp index, the config
    assert not list(cache_dir.rglob("*.tmp"))


# -- the import graph ----------------------------------------------------------------------------
def _imports(tree: ast.AST):
    """Names of sibling modules imported anywhere in a module, except for type checking."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            for name in [node.module] if node.module else [a.name for a in node.names]:
                yield name.split(".")[0]
        stack.extend(ast.iter_child_nodes(node))


def test_the_engine_has_no_import_cycle():
    import networkx as nx

    graph = nx.DiGraph()
    for file in (ROOT / "engine").glob("*.py"):
        for target in _imports(ast.parse(file.read_text(encoding="utf-8"))):
            graph.add_edge(file.stem, target)
    assert list(nx.simple_cycles(graph)) == []


def test_a_warm_explain_needs_no_sympy_and_latex_does(tmp_path):
    def explain(*extra: str) -> tuple[str, str]:
        code = ("import sys; from dlformula.cli import main; "
                f"main(['explain', 'act_memory', '-c', {EXAMPLE!r}, '--depth', '1', *{extra!r}])"
                "; print('sympy' in sys.modules, file=sys.stderr)")
        env = dict(os.environ, DLFORMULA_CACHE_DIR=str(tmp_path))
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        return res.stdout, res.stderr.splitlines()[-1]

    cold, imported = explain()
    assert imported == "True"  # builds the model
    warm, imported = explain()
    assert (warm, imported) == (cold, "False")
    assert "act_memory = " in warm
    # formulas/memory.yaml in a checkout, .../site-packages/dlformula/formulas/memory.yaml installed
    assert re.search(r"defined at \S*formulas/memory\.yaml:\d+", warm)
    latex, imported = explain("--latex")
    assert imported == "True" and "latex: " in latex
