"""Hostile and broken files (issue 14): every file dlformula reads goes through one bounded
reader; each refusal is one `error:` line naming the file (and line), exit 2, nothing cached."""

from __future__ import annotations

import os
import time

import pytest

from conftest import EXAMPLES, write

BASE = (EXAMPLES / "gpt3-175b.yaml").read_text()


def _one_error(code: int, err: str, expect: str, exit_code: int = 2) -> None:
    lines = err.strip().splitlines()
    assert code == exit_code, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert expect in lines[0], err
    assert "internal error" not in err and "Traceback" not in err


def _bomb(levels: int) -> str:
    rows = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    rows += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(rows) + "\nmodel: {preset: gpt3-175b}\n"


def _yaml_cache_files() -> set[str]:
    folder = os.path.join(os.environ["DLFORMULA_CACHE_DIR"], "yaml")
    return set(os.listdir(folder)) if os.path.isdir(folder) else set()


@pytest.mark.parametrize("levels", [7, 9])
def test_alias_bomb_is_refused_fast_and_not_cached(run, tmp_path, levels):
    cfg = write(tmp_path, "bomb.yaml", _bomb(levels))
    before = _yaml_cache_files()
    start = time.perf_counter()
    code, _, err = run("eval", cfg)
    assert time.perf_counter() - start < 2
    _one_error(code, err, "bomb.yaml:")
    assert "aliases" in err
    assert _yaml_cache_files() == before


def test_small_alias_use_still_works():
    from dlformula.yamlfile import load_yaml

    tree = load_yaml("a: &x {b: [1, 2]}\nc: *x\nd: *x\n", "t.yaml")
    assert tree.plain() == {"a": {"b": [1, 2]}, "c": {"b": [1, 2]}, "d": {"b": [1, 2]}}


def test_recursive_alias(run, tmp_path):
    cfg = write(tmp_path, "rec.yaml", "model: &m {preset: gpt3-175b, x: *m}\n")
    code, _, err = run("eval", cfg)
    _one_error(code, err, "rec.yaml:1: an alias")


@pytest.mark.parametrize("depth", [65, 500, 40000])
def test_deep_nesting_refused_before_parsing(run, tmp_path, depth):
    cfg = write(tmp_path, "deep.yaml", "model: " + "[" * depth + "]" * depth + "\n")
    code, _, err = run("eval", cfg)
    _one_error(code, err, "deep.yaml:1: YAML nested more than 64 levels")


def test_brackets_in_quotes_and_comments_do_not_count(run, tmp_path):
    cfg = write(tmp_path, "q.yaml", BASE + "# " + "[" * 100 + "\n" + "# '" + "{" * 100 + "'\n")
    code, out, err = run("eval", cfg, "--only", "params_total")
    assert code == 0, err


def test_merge_key_and_bad_tags(run, tmp_path):
    cfg = write(tmp_path, "merge.yaml", BASE + "b: &b {x: 1}\nc:\n  <<: *b\n")
    code, _, err = run("eval", cfg)
    _one_error(code, err, "merge.yaml:8: YAML merge keys")
    cfg = write(tmp_path, "tag.yaml", BASE.replace("seq_len: 2048", "seq_len: !!float x"))
    code, _, err = run("eval", cfg)
    _one_error(code, err, "tag.yaml:5: cannot read value 'x'")
    cfg = write(tmp_path, "py.yaml", BASE.replace("seq_len: 2048",
                                                   "seq_len: !!python/object:os.system x"))
    code, _, err = run("eval", cfg)
    _one_error(code, err, "py.yaml:5: unsupported YAML tag")


def test_invalid_utf8_names_the_line(run, tmp_path):
    p = tmp_path / "latin.yaml"
    p.write_bytes(BASE.encode() + "name: caf\u00e9\n".encode("latin-1"))
    code, _, err = run("eval", str(p))
    _one_error(code, err, "latin.yaml:6: config file is not UTF-8")


@pytest.mark.parametrize("command", [["eval"], ["check"], ["validate"]])
def test_devices_and_fifos_refused(run, tmp_path, command):
    _one_error(*run(*command, "/dev/zero")[::2], "/dev/zero: ")
    fifo = tmp_path / "f.yaml"
    os.mkfifo(fifo)
    start = time.perf_counter()
    code, _, err = run(*command, str(fifo))
    assert time.perf_counter() - start < 2
    _one_error(code, err, "not a regular file")


def test_oversized_file(run, tmp_path):
    from dlformula import yamlfile

    p = tmp_path / "big.yaml"
    p.write_text(BASE + "#" * (yamlfile.SMALL_FILE_LIMIT + 10) + "\n")
    code, _, err = run("eval", str(p))
    _one_error(code, err, "bytes, more than the")


def test_hf_config_deep_json_and_device(run, tmp_path):
    cfg = str(EXAMPLES / "gpt3-175b.yaml")
    deep = write(tmp_path, "deep.json", "[" * 100000 + "]" * 100000)
    _one_error(*run("eval", cfg, "--hf-config", deep)[::2], "deep.json:1: JSON nested")
    _one_error(*run("eval", cfg, "--hf-config", "/dev/zero")[::2], "not a regular file")


def test_bounded_reader_directly(tmp_path):
    from dlformula.errors import ModelError
    from dlformula.yamlfile import read_file_text

    with pytest.raises(ModelError, match="is a folder"):
        read_file_text(str(tmp_path), "formula file")
    with pytest.raises(ModelError, match="does not exist"):
        read_file_text(str(tmp_path / "missing.yaml"), "formula file")
    p = tmp_path / "ok.yaml"
    p.write_text("a: 1\n")
    assert read_file_text(str(p), "x", limit=5) == "a: 1\n"
    with pytest.raises(ModelError, match="more than the 4"):
        read_file_text(str(p), "x", limit=4)
