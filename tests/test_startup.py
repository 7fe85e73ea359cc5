"""Start-up: what a warm `dlformula eval` skips, and the caches that let it skip them notice
every change -- an installed, upgraded or removed plugin, an edited YAML file."""

from __future__ import annotations

import marshal
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_plugins import DIST_NAME, DIST_VERSION, ENTRY_POINTS, _dist_files

from conftest import EXAMPLES, ROOT

GPT3 = str(EXAMPLES / "gpt3-175b.yaml")
EXAMPLE_CONFIG = str(ROOT / "tests" / "data" / "plugins" / "example_plugin" / "config.yaml")
INFO = f"dlformula_example-{DIST_VERSION}.dist-info"


def install(site: Path, entry_points: str = ENTRY_POINTS) -> None:
    for name, data in _dist_files(entry_points).items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(data)


def upgrade(site: Path, version: str) -> None:
    """What pip does: the old .dist-info goes, one named after the new version comes."""
    new = site / f"dlformula_example-{version}.dist-info"
    (site / INFO).rename(new)
    (new / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST_NAME}\n"
                                  f"Version: {version}\n")


# -- installed plugins: discovery is cached until the installation changes ------------------------
class Site(type(Path())):  # type: ignore[misc]
    """A site folder on sys.path, counting how often importlib.metadata is asked."""

    calls: list[int]


@pytest.fixture
def site(tmp_path, monkeypatch):
    from dlformula import entry_points

    monkeypatch.setenv("DLFORMULA_CACHE_DIR", str(tmp_path / "cache"))
    site = Site(tmp_path / "site")
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    site.calls = []
    discover = entry_points._discover_entry_points

    def counted():
        site.calls.append(1)
        return discover()

    monkeypatch.setattr(entry_points, "_discover_entry_points", counted)
    yield site
    for mod in [m for m in sys.modules if m.startswith("dlformula_example")]:
        del sys.modules[mod]


def _example(site: Path) -> list[tuple[str, str, str, str]]:
    """The `example` entry points a run would find now."""
    from dlformula.entry_points import installed_entry_points

    return [tuple(ep) for ep in installed_entry_points() if ep.name == "example"]


def test_entry_point_discovery_is_cached(site):
    install(site)
    assert _example(site) == [("example", "dlformula_example", DIST_NAME, DIST_VERSION)]
    assert _example(site) == [("example", "dlformula_example", DIST_NAME, DIST_VERSION)]
    assert len(site.calls) == 1  # the second answer came from the cache folder
    assert list((Path(os.environ["DLFORMULA_CACHE_DIR"])).glob("entry-points-*.marshal"))


def test_a_new_file_in_a_folder_on_sys_path_keeps_the_cache(site):
    """Under `python -c` the working directory is on sys.path: a file appearing there (a
    config, an output) does not change which distributions are installed."""
    install(site)
    assert _example(site)
    (site / "plan.xlsx").write_bytes(b"not a distribution")
    (site / "notes").mkdir()
    assert _example(site) == [("example", "dlformula_example", DIST_NAME, DIST_VERSION)]
    assert len(site.calls) == 1


def test_installing_a_plugin_is_noticed_on_the_next_run(site):
    assert _example(site) == []
    install(site)
    assert _example(site) == [("example", "dlformula_example", DIST_NAME, DIST_VERSION)]


def test_uninstalling_a_plugin_is_noticed_on_the_next_run(site):
    install(site)
    assert _example(site)
    shutil.rmtree(site / INFO)
    assert _example(site) == []


def test_upgrading_a_plugin_is_noticed_on_the_next_run(site):
    install(site)
    assert _example(site)[0][3] == DIST_VERSION
    upgrade(site, "0.2.0")
    assert _example(site) == [("example", "dlformula_example", DIST_NAME, "0.2.0")]


def test_an_entry_point_edited_in_place_is_noticed(site):
    """An .egg-info rewritten by `setup.py egg_info` keeps its folder: the file's stat counts."""
    install(site)
    assert _example(site)[0][1] == "dlformula_example"
    (site / INFO / "entry_points.txt").write_text(
        "[dlformula]\nexample = dlformula_example:hooks\n")
    assert _example(site)[0][1] == "dlformula_example:hooks"


def test_a_corrupt_entry_point_cache_is_ignored(site):
    from dlformula.entry_points import _entry_point_cache_path

    install(site)
    _example(site)
    Path(_entry_point_cache_path()).write_bytes(b"not marshal data")
    assert _example(site) == [("example", "dlformula_example", DIST_NAME, DIST_VERSION)]
    assert len(site.calls) == 2


def test_a_finder_that_lists_distributions_disables_the_cache(site, monkeypatch):
    from dlformula.entry_points import _install_fingerprint

    class Finder:
        def find_spec(self, *args):
            return None

        def find_distributions(self, *args, **kwargs):
            return iter(())

    assert _install_fingerprint() is not None
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder()])
    assert _install_fingerprint() is None
    install(site)
    _example(site)
    _example(site)
    assert len(site.calls) == 2  # asked importlib.metadata every time


def test_entry_points_load_as_importlib_metadata_loads_them(site):
    from importlib.metadata import EntryPoint

    from dlformula.entry_points import InstalledEntryPoint, load_entry_point

    install(site)
    for value in ("dlformula_example", "dlformula_example:formula_folders",
                  "dlformula_example : formula_folders [extra]", "json:decoder.JSONDecoder"):
        ep = InstalledEntryPoint("x", value, "d", "1")
        assert load_entry_point(ep) is EntryPoint("x", value, "dlformula").load()
    for value in ("not a module!", "dlformula_example:no_such_hook"):
        with pytest.raises(Exception) as ours:
            load_entry_point(InstalledEntryPoint("x", value, "d", "1"))
        with pytest.raises(Exception) as theirs:
            EntryPoint("x", value, "dlformula").load()
        assert (type(ours.value), str(ours.value)) == (type(theirs.value), str(theirs.value))


def _cli(*args: str, env: dict[str, str], modules: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """`dlformula ARGS` in a fresh interpreter; with `modules`, stderr's last line lists which
    of them were imported."""
    code = ("import sys; from dlformula.cli import main; code = main(sys.argv[1:]); "
            f"print([m for m in {modules!r} if m in sys.modules], file=sys.stderr); "
            "sys.exit(code)")
    res = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                         text=True, timeout=120)
    return res.returncode, res.stdout, res.stderr


def test_the_cli_notices_an_installed_plugin_going_away(tmp_path):
    site = tmp_path / "site"
    install(site)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLFORMULA_")}
    env.update(DLFORMULA_CACHE_DIR=str(tmp_path / "cache"), DLFORMULA_LOAD_PLUGINS="example",
               PYTHONPATH=os.pathsep.join([str(site), env.get("PYTHONPATH", "")]))
    watched = ("importlib.metadata",)
    code, out, err = _cli("hardware", env=env, modules=watched)
    assert code == 0 and "acme-x1" in out, err
    code, out, err = _cli("hardware", env=env, modules=watched)
    assert code == 0 and "acme-x1" in out, err
    assert err.splitlines()[-1] == "[]"  # warm: discovery came from the cache
    shutil.rmtree(site / INFO)
    code, out, err = _cli("hardware", env=env)
    assert code == 1
    assert err.splitlines()[0].startswith(
        "error: DLFORMULA_LOAD_PLUGINS names 'example', which is not an installed plugin")


def test_warm_eval_imports_neither_pyyaml_nor_importlib_metadata_nor_other_commands(tmp_path):
    site = tmp_path / "site"
    install(site)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLFORMULA_")}
    env.update(DLFORMULA_CACHE_DIR=str(tmp_path / "cache"), DLFORMULA_LOAD_PLUGINS="example",
               PYTHONPATH=os.pathsep.join([str(site), env.get("PYTHONPATH", "")]))
    watched = ("yaml", "importlib.metadata", "dlformula.cli_sweep", "dlformula.cli_export",
               "dlformula.cli_validate", "sympy", "numpy")
    first = _cli("eval", EXAMPLE_CONFIG, env=env, modules=watched)
    assert first[0] == 0, first[2]
    second = _cli("eval", EXAMPLE_CONFIG, env=env, modules=watched)
    assert second[0] == 0, second[2]
    assert second[1] == first[1]
    assert second[2].splitlines()[-1] == "[]"


# -- lazily imported commands --------------------------------------------------------------------
def test_lazy_commands_are_listed_run_and_cannot_be_taken_by_a_plugin(run, tmp_path):
    from dlformula.cli import LAZY_COMMANDS, cli

    assert set(LAZY_COMMANDS) <= set(cli.commands)
    code, out, _ = run("--help")
    assert code == 0
    listed = {line.split()[0] for line in out.split("Commands:")[1].splitlines() if line.strip()}
    assert set(LAZY_COMMANDS) <= listed
    code, out, _ = run("sweep", "--help")
    assert code == 0 and "--vary" in out
    plugin = tmp_path / "p"
    plugin.mkdir()
    (plugin / "__init__.py").write_text(
        "import click\nfrom dlformula.hookspecs import hookimpl\n@hookimpl\n"
        "def register_commands(cli):\n    cli.add_command(click.Command('export'))\n")
    code, _, err = run("--plugin", str(plugin), "list", "step_time")
    assert code == 1
    assert err.splitlines() == ["error: plugin 'p' adds a command 'export', which dlformula "
                                "already has; rename the plugin's command"]


# -- parsed YAML is cached by content --------------------------------------------------------------
@pytest.fixture
def yaml_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DLFORMULA_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "yaml"


def _yaml_files() -> list[Path]:
    return sorted([*EXAMPLES.glob("*.yaml"), *(ROOT / "hardware").glob("*.yaml"),
                   *(ROOT / "presets").glob("*.yaml"), *(ROOT / "formulas").glob("*.yaml")])


def test_a_cached_parse_equals_a_fresh_one(yaml_cache):
    from dlformula.errors import ModelError
    from dlformula.yamlfile import _parse, load_yaml

    texts = [f.read_text(encoding="utf-8") for f in _yaml_files()]
    texts += ["", "a: 1e9\nb: [1, 2.5, -0.0, .nan, true, null, '3']\nc: {d: {e: x}}\n", "4"]
    for text in texts:
        fresh = _parse(text, "t.yaml", ModelError)
        first = load_yaml(text, "t.yaml")
        cached = load_yaml(text, "t.yaml")
        assert first == fresh
        assert repr(cached) == repr(fresh)  # same values, lines, types and key order
    assert len(list(yaml_cache.glob("*.marshal"))) == len(set(texts))


def test_a_yaml_error_is_never_cached(yaml_cache):
    from dlformula.errors import UsageError
    from dlformula.yamlfile import load_yaml

    for text in ("a: 1\na: 2\n", "a: [1\n"):
        messages = []
        for _ in range(2):
            with pytest.raises(UsageError) as exc:
                load_yaml(text, "c.yaml", UsageError)
            messages.append(str(exc.value))
        assert messages[0] == messages[1]
    assert not yaml_cache.exists() or not list(yaml_cache.glob("*.marshal"))


def test_a_corrupt_yaml_cache_entry_is_reparsed(yaml_cache):
    from dlformula.yamlfile import _cache_file, load_yaml

    text = "model:\n  layers: 96\n"
    expected = load_yaml(text, "c.yaml")
    Path(_cache_file(text)).write_bytes(b"\x00garbage")
    assert load_yaml(text, "c.yaml") == expected
    Path(_cache_file(text)).write_bytes(marshal.dumps(("wrong", "shape", 1)))
    assert load_yaml(text, "c.yaml") == expected


def test_an_edited_config_is_read_again(tmp_path, yaml_cache, run):
    config = tmp_path / "c.yaml"
    text = Path(GPT3).read_text()
    config.write_text(text)
    only = ("--format", "json", "--only", "global_batch")
    code, before, err = run("eval", str(config), *only)
    assert code == 0, err
    config.write_text(text.replace("global_batch: 1536", "global_batch: 768"))
    code, after, err = run("eval", str(config), *only)
    assert code == 0, err
    assert '"value": 1536' in before and '"value": 768' in after


def test_the_yaml_cache_keeps_the_newest_entries(yaml_cache, monkeypatch):
    from dlformula import yamlfile

    monkeypatch.setattr(yamlfile, "YAML_CACHE_ENTRIES", 5)
    for i in range(12):
        yamlfile.load_yaml(f"n: {i}\n", "n.yaml")
    assert len(list(yaml_cache.glob("*.marshal"))) == 5
    assert yamlfile.load_yaml("n: 11\n", "n.yaml").plain() == {"n": 11}


def test_dumped_config_keys_are_cached_by_their_exact_data(yaml_cache):
    import yaml

    from dlformula.yamlfile import dump_yaml

    for data in ({"inputs": {"w": {"unit": "byte", "default": 2097152, "doc": "x"}}},
                 {"inputs": {"w": {"default": 1}}}, {"inputs": {"w": {"default": 1.0}}},
                 {"inputs": {"w": {"default": True}}}, {"b": [1, 2], "a": None}):
        assert dump_yaml(data) == yaml.safe_dump(data, sort_keys=False)
        assert dump_yaml(data) == yaml.safe_dump(data, sort_keys=False)  # from the cache
    assert len(list(yaml_cache.glob("*.marshal"))) == 5
    with pytest.raises(yaml.representer.RepresenterError):  # not plain data: as PyYAML does
        dump_yaml({"p": Path("x")})


# -- the program's entry point: a plain eval without click ---------------------------------------
_PROGRAM_PROBE = ("import sys; before = set(sys.modules); from dlformula.launch import main; "
                  "code = main(sys.argv[1:]); "
                  "print(sorted(m for m in {watched!r} if m in sys.modules and m not in before),"
                  " file=sys.stderr); sys.exit(code)")


def _program(args: list[str], watched: tuple[str, ...], cache: Path) -> tuple[int, str, str]:
    env = dict(os.environ, DLFORMULA_CACHE_DIR=str(cache))
    res = subprocess.run([sys.executable, "-c", _PROGRAM_PROBE.format(watched=watched), *args],
                         env=env, capture_output=True, text=True, timeout=120)
    return res.returncode, res.stdout, res.stderr


def test_a_warm_eval_imports_only_what_it_uses(tmp_path):
    """Not click (its commands are not needed to read `eval CONFIG`), not importlib.resources,
    pathlib or fractions (data folders are listed with os), not hashlib (the cache's keys come
    from the small _blake2 module)."""
    watched = ("click", "importlib.resources", "pathlib", "fractions", "hashlib", "yaml",
               "importlib.metadata", "sympy", "numpy", "networkx")
    args = ["eval", GPT3, "--set", "parallelism.tp=4", "--set", "parallelism.dp=32"]
    code, first, err = _program(args, watched, tmp_path)
    assert code == 0, err
    code, second, err = _program(args, watched, tmp_path)
    assert code == 0, err
    assert second == first
    assert err.splitlines()[-1] == "[]"


def test_python_m_dlformula_is_the_program(run):
    expected = run("eval", GPT3, "--only", "step_time")[1]  # (the session's cache: warm)
    res = subprocess.run([sys.executable, "-m", "dlformula", "eval", GPT3, "--only", "step_time"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout == expected
    res = subprocess.run([sys.executable, "-m", "dlformula", "--version"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.startswith("dlformula ")


def test_the_fast_path_knows_the_options_click_knows():
    """The fast path's option table is click's `eval` command, option for option."""
    import click

    from dlformula.cli import cli
    from dlformula.launch import EVAL_OPTIONS, GROUP_OPTIONS, PATH_OPTIONS

    def table(command: click.Command) -> dict[str, object]:
        out: dict[str, object] = {}
        for p in command.params:
            if not isinstance(p, click.Option) or p.name in ("help", "version"):
                continue
            long = [o for o in p.opts if o.startswith("--")]
            assert len(long) == 1 and not p.secondary_opts, p.opts
            kind: object = ("flag" if p.is_flag else "many" if p.multiple
                            else tuple(p.type.choices) if isinstance(p.type, click.Choice)
                            else "one")
            out[long[0]] = kind
        return out

    eval_cmd = cli.commands["eval"]
    assert table(eval_cmd) == EVAL_OPTIONS
    assert table(cli) == GROUP_OPTIONS
    paths = {f"--{p.name.replace('_', '-')}" for p in eval_cmd.params
             if isinstance(p, click.Option) and isinstance(p.type, click.Path)
             and not p.type.dir_okay}
    assert paths == set(PATH_OPTIONS)
    positional = [p for p in eval_cmd.params if isinstance(p, click.Argument)]
    assert [(p.name, p.nargs, p.required) for p in positional] == [("config", 1, True)]


@pytest.mark.parametrize("args", [
    ["--no-cache", "eval", "CONFIG", "--only", "step_time"],
    ["--only", "tokens_*"],
    ["--only=step_time", "--format=json"],
    ["--format", "csv", "--only", "mfu", "--set", "parallelism.tp=4", "--set",
     "parallelism.dp=32"],
    ["--brief"],
    ["--breakdown", "layer"],
    ["--format", "yaml", "--only", "hfu"],
    ["--set", "parallelism.tp=3"],
    ["--set", "nosuch.key=1", "--set", "parallelism.tpp=2"],
    ["--set", "parallelism.tp"],
    ["--set", "training.global_batch=15360", "--brief"],
    ["--brief", "--format", "json"],
    ["--breakdown", "layer", "--format", "csv"],
    ["--format", "xml"],
    ["--only"],
    ["--only", "a", "--only", "b"],
    ["--frobnicate"],
    ["-h"],
    ["--hf-config", "no/such/config.json"],
])
def test_the_fast_path_prints_what_click_prints(args, run):
    """Every invocation gives the same output, errors and exit code through the program's
    entry point (fast path where it applies) as through click alone."""
    import contextlib
    import io

    from dlformula.launch import main

    full = args if "CONFIG" in args else ["eval", "CONFIG", *args]
    full = [GPT3 if a == "CONFIG" else a for a in full]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(full)
    assert (code, out.getvalue(), err.getvalue()) == run(*full)


def test_the_fast_path_takes_only_plain_eval_invocations(tmp_path):
    from dlformula.launch import fast_eval_args

    assert fast_eval_args(["eval", GPT3, "--set", "a.b=1", "--set=c.d=2", "--brief"]) == {
        "config": GPT3, "--set": ["a.b=1", "c.d=2"], "--brief": True}
    assert fast_eval_args(["--plugin", "p", "--plugin=q", "eval", "--only", "x", GPT3]) == {
        "config": GPT3, "--plugin": ["p", "q"], "--only": "x"}
    for args in (["eval"], ["eval", GPT3, GPT3], ["eval", GPT3, "--help"], ["list"],
                 ["eval", GPT3, "--brief", "--brief"], ["eval", GPT3, "--brief=yes"],
                 ["eval", GPT3, "--format", "xml"], ["eval", GPT3, "--only"],
                 ["--version"], ["eval", str(tmp_path)],
                 ["eval", GPT3, "--hf-config", str(tmp_path)], ["--no-cache=1", "eval", GPT3]):
        assert fast_eval_args(args) is None, args


def test_a_plugin_that_adds_commands_sends_eval_through_click(tmp_path):
    """Its commands must be registered (and checked against dlformula's) on every run."""
    plugin = tmp_path / "p"
    plugin.mkdir()
    (plugin / "__init__.py").write_text(
        "import click\nfrom dlformula.hookspecs import hookimpl\n@hookimpl\n"
        "def register_commands(cli):\n    cli.add_command(click.Command('export'))\n")
    code, out, err = _program(["--plugin", str(plugin), "eval", GPT3], ("click",),
                              tmp_path / "cache")
    assert code == 1 and out == ""
    assert err.splitlines()[0] == ("error: plugin 'p' adds a command 'export', which dlformula "
                                   "already has; rename the plugin's command")
