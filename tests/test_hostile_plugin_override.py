"""Issue 14: a plugin's hardware node or preset replaces a core one only when it says
`override: true`, and `dlformula plugins` lists what it replaced."""

from __future__ import annotations

import json

from conftest import EXAMPLES

L70 = str(EXAMPLES / "llama3-70b.yaml")


def _core_file(kind: str, name: str) -> str:
    from dlformula.diskpath import package_folder

    return (package_folder(f"dlformula.{kind}") / f"{name}.yaml").read_text()


def _plugin(tmp_path, kind: str, name: str, text: str) -> str:
    folder = tmp_path / "plug"
    (folder / kind).mkdir(parents=True)
    (folder / kind / f"{name}.yaml").write_text(text)
    return str(folder)


def test_silent_node_replacement_is_refused(run, tmp_path):
    text = _core_file("hardware", "h100-sxm").replace("80", "800", 1)
    plugin = _plugin(tmp_path, "hardware", "h100-sxm", text)
    code, out, err = run("--plugin", plugin, "eval", L70, "--only", "memory_per_gpu")
    assert code == 1 and out == "", err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert "h100-sxm.yaml:1: hardware node 'h100-sxm' of plug replaces" in err
    assert "override: true" in err


def test_declared_node_override_is_used_and_listed(run, tmp_path):
    text = "override: true\n" + _core_file("hardware", "h100-sxm")
    plugin = _plugin(tmp_path, "hardware", "h100-sxm", text)
    code, out, err = run("--plugin", plugin, "eval", L70, "--only", "params_total")
    assert code == 0, err
    code, out, err = run("--plugin", plugin, "plugins")
    assert code == 0, err
    assert "overrides hardware node h100-sxm (was " in out
    code, out, err = run("--plugin", plugin, "plugins", "--format", "json")
    entry = next(e for e in json.loads(out)["plugins"] if e["name"] == "plug")
    assert list(entry["overrides"]) == ["hardware node h100-sxm"]
    # `hardware NODE` says which file it replaced; the core's own node says nothing of the kind.
    code, out, err = run("--plugin", plugin, "hardware", "h100-sxm")
    assert code == 0, err
    assert "  replaces: the one of dlformula (" in out and "h100-sxm.yaml)" in out
    code, out, err = run("hardware", "h100-sxm")
    assert code == 0 and "replaces:" not in out, err


def test_preset_override(run, tmp_path):
    text = _core_file("presets", "llama3-70b")
    plugin = _plugin(tmp_path, "presets", "llama3-70b", text)
    code, _, err = run("--plugin", plugin, "presets")
    assert code == 1 and "preset 'llama3-70b' of plug replaces" in err
    plugin2 = _plugin(tmp_path / "b", "presets", "llama3-70b", "override: true\n" + text)
    code, out, err = run("--plugin", plugin2, "plugins")
    assert code == 0 and "overrides preset llama3-70b" in out, err
    code, out, err = run("--plugin", plugin2, "presets", "llama3-70b")
    assert code == 0 and "  replaces: the one of dlformula (" in out, err


def test_override_must_be_boolean(run, tmp_path):
    text = "override: yes please\n" + _core_file("hardware", "h100-sxm")
    plugin = _plugin(tmp_path, "hardware", "h100-sxm", text)
    code, _, err = run("--plugin", plugin, "hardware")
    assert code == 1 and "h100-sxm.yaml:1: 'override' must be true or false" in err
