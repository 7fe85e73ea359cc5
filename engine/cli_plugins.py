"""`dlformula plugins` and the wiring that lets plugins add commands and `--plugin PATH`.

click resolves a subcommand before the group's callback runs, so plugin commands must exist
before click parses anything: `loaded_plugins(cli, argv)` reads the `--plugin` options that come
before the subcommand, loads the plugin set (making it the one every `Engine()` of this
invocation uses), adds the plugins' commands, and undoes both on exit. Only click is imported
here at module level (this module is on every command's start-up path).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from .errors import ModelError, display_path, raise_all

plugin_option = click.option(
    "--plugin", "plugin_paths", multiple=True, metavar="PATH", type=click.Path(),
    help="Load a plugin folder (formulas/, hardware/, presets/ and optional Python hooks); "
         "repeatable. DLFORMULA_PLUGINS adds folders too.")


def plugin_paths_from_args(args: list[str]) -> list[str]:
    """The values of `--plugin PATH` / `--plugin=PATH` given before the subcommand."""
    out, i = [], 0
    while i < len(args):
        token = args[i]
        if token == "--plugin":
            if i + 1 >= len(args):
                break  # click reports the missing value
            out.append(args[i + 1])
            i += 2
            continue
        if token.startswith("--plugin="):
            out.append(token.split("=", 1)[1])
        elif token == "--" or not token.startswith("-"):
            break
        i += 1
    return out


def add_plugin_commands(group: click.Group, plugins: Any) -> list[str]:
    """Let each plugin add its commands to `group`; a plugin may not replace a command.
    Returns the names added (so they can be removed again)."""
    added: list[str] = []
    errors = []
    for info in plugins.infos:
        before = dict(group.commands)
        plugins._call(info, "register_commands", group)
        for name, cmd in list(group.commands.items()):
            if name in before and before[name] is not cmd:
                group.commands[name] = before[name]
                errors.append(ModelError(f"plugin '{info.name}' adds a command '{name}', which "
                                         "dlformula already has; rename the plugin's command"))
            elif name not in before:
                added.append(name)
    if errors:
        for name in added:
            group.commands.pop(name, None)
        raise_all(errors)  # type: ignore[arg-type]
    return added


@contextmanager
def loaded_plugins(group: click.Group, argv: list[str] | None = None) -> Iterator[Any]:
    """Load the plugins for one invocation (with argv's --plugin folders) and their commands."""
    from . import plugin_manager

    args = list(sys.argv[1:] if argv is None else argv)
    plugin_manager.push_cli_paths(tuple(plugin_paths_from_args(args)))
    added: list[str] = []
    try:
        plugins = plugin_manager.default()
        added = add_plugin_commands(group, plugins)
        yield plugins
    finally:
        for name in added:
            group.commands.pop(name, None)
        plugin_manager.pop_cli_paths()


def use_plugin_paths(ctx: click.Context, paths: tuple[str, ...]) -> None:
    """For the group callback: make `paths` the plugin folders of this invocation when the
    caller did not go through `loaded_plugins` (e.g. click's CliRunner); a no-op otherwise."""
    from . import plugin_manager

    paths = tuple(paths)
    current = plugin_manager._CLI_PATHS[-1] if plugin_manager._CLI_PATHS else ()
    if paths and paths != current:
        plugin_manager.push_cli_paths(paths)
        ctx.call_on_close(plugin_manager.pop_cli_paths)


# -- dlformula plugins ---------------------------------------------------------------------------
def describe(engine: Any) -> list[dict[str, Any]]:
    """What each loaded plugin is and contributes (the `plugins --format json` contract)."""
    plugins = engine.plugins
    if plugins is None:
        return []
    model = engine.model
    origin_of = {s.path: s.origin for s in engine.sources}
    out = []
    for info in plugins.infos:
        folders = [f for f in plugins.folders() if f.origin == info.name]
        files = {kind: [display_path(f) if kind == "formulas" else f.name[:-5]
                        for folder in folders if folder.kind == kind for f in folder.files()]
                 for kind in ("formulas", "hardware", "presets")}
        files["formulas"] += [s.path for s in plugins.sources() if s.origin == info.name]
        mine: dict[str, list[str]] = {"inputs": [], "quantities": [], "constants": []}
        for kind, table in (("inputs", model.inputs), ("constants", model.constants),
                            ("quantities", model.quantities)):
            for name, d in table.items():
                if origin_of.get(d.path) == info.name and name not in model.overrides:
                    mine[kind].append(name)
        overrides = {}
        for name, replaced in model.overrides.items():
            d = (model.quantities.get(name) or model.inputs.get(name)
                 or model.constants.get(name))
            if d is not None and origin_of.get(d.path) == info.name:
                overrides[name] = [_short_location(r) for r in replaced]
        catalog = engine.catalog
        replaced = getattr(catalog, "replaced", {})
        for kind, word in (("hardware", "hardware node"), ("presets", "preset")):
            for ident, (_, was) in sorted(replaced.get(kind, {}).items()):
                if catalog._files[kind][ident][1] == info.name:
                    overrides[f"{word} {ident}"] = [display_path(was)]
        probe = click.Group("probe")
        plugins._call(info, "register_commands", probe)
        out.append({
            "name": info.name,
            "version": info.version,
            "kind": info.kind,
            "from": info.origin,
            "hooks": plugins.hooks_of(info),
            "formula_files": files["formulas"],
            "hardware": files["hardware"],
            "presets": files["presets"],
            "config_keys": [model.inputs[n].config for n in mine["inputs"]],
            "quantities": mine["quantities"],
            "constants": mine["constants"],
            "overrides": overrides,
            "functions": [fn.name for owner, fn in plugins.functions() if owner == info.name],
            "commands": sorted(probe.commands),
        })
    return out


def _short_location(location: str) -> str:
    path, _, line = location.rpartition(":")
    return f"{display_path(path)}:{line}" if path else location


def _plural(n: int, word: str, plural: str = "") -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def render(entries: list[dict[str, Any]]) -> str:
    lines = []
    for e in entries:
        where = e["kind"] if e["kind"] in ("core", "folder") else f"{e['kind']}: {e['from']}"
        if e["kind"] == "folder":
            where = f"folder {e['from']}"
        version = f" {e['version']}" if e["version"] else ""
        lines.append(f"{e['name']}{version} ({where})")
        lines.append(f"  hooks: {', '.join(e['hooks']) or 'none'}")
        if e["formula_files"]:
            lines.append(f"  formulas: {_plural(len(e['formula_files']), 'file')}, "
                         f"{_plural(len(e['quantities']), 'quantity', 'quantities')}"
                         f", {_plural(len(e['config_keys']), 'config key')}")
        for key, title in (("hardware", "hardware nodes"), ("presets", "presets"),
                           ("functions", "functions"), ("commands", "commands")):
            if e[key]:
                lines.append(f"  {title}: {', '.join(e[key])}")
        if e["config_keys"] and e["kind"] != "core":
            lines.append(f"  config keys: {', '.join(e['config_keys'])}")
        for name, replaced in e["overrides"].items():
            lines.append(f"  overrides {name} (was {', '.join(replaced)})")
    return "\n".join(lines) + "\n"


@click.command("plugins")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@click.pass_context
def plugins_command(ctx: click.Context, fmt: str) -> None:
    """List loaded plugins: version, where each comes from and what it contributes.

    The core and the built-in plugins are listed too: they use the same hooks. Installed
    plugins are found through the `dlformula` entry-point group (DLFORMULA_LOAD_PLUGINS limits
    them); local folders come from --plugin and DLFORMULA_PLUGINS.
    """
    from .core import Engine

    obj = ctx.ensure_object(dict)
    engine = obj.get("engine")
    if engine is None:
        engine = obj["engine"] = Engine(use_cache=not obj.get("no_cache", False))
    entries = describe(engine)
    if fmt == "json":
        import json

        click.echo(json.dumps({"plugins": entries}, indent=2))
    else:
        click.echo(render(entries), nl=False)
