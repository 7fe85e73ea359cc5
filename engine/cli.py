"""Command line: parse arguments, call the library, print. Results go to stdout, diagnostics
to stderr, and every error becomes one line per problem and an exit code, here and only here.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from .cli_plugins import loaded_plugins, plugin_option, plugins_command, use_plugin_paths
from .errors import UsageError
from .eval_command import FORMATS

# Commands whose modules are imported only when the command runs or --help lists it: compiling
# cli_sweep.py alone costs `dlformula eval` about 10 ms (nothing is byte-compiled on these
# machines). name -> (module, attribute).
LAZY_COMMANDS = {
    "export": ("cli_export", "export"),
    "sweep": ("cli_sweep", "sweep_cmd"),
    "search": ("cli_sweep", "search_cmd"),
    "plot": ("cli_sweep", "plot_cmd"),
    "validate": ("cli_validate", "validate"),
    "calibrate": ("cli_calibrate", "calibrate_cmd"),
}


class LazyCommand(click.Command):
    """Stands in `cli.commands` for a command of LAZY_COMMANDS until first used, so every
    name is there from the start: plugins cannot take it, `--help` and the docs test list it."""

    def __init__(self, name: str, module: str, attr: str) -> None:
        super().__init__(name)
        self.target = (module, attr)

    def load(self) -> click.Command:
        import importlib

        module, attr = self.target
        command: click.Command = getattr(importlib.import_module(f"dlformula.{module}"), attr)
        return command

    # Anyone holding the stand-in itself still gets the real command's behaviour.
    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        return self.load().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        return self.load().invoke(ctx)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        return self.load().main(*args, **kwargs)

    def get_short_help_str(self, limit: int = 45) -> str:
        return self.load().get_short_help_str(limit)

    def get_help(self, ctx: click.Context) -> str:
        return self.load().get_help(ctx)


class LazyGroup(click.Group):
    """A group that swaps a LazyCommand for the real command when click asks for it."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name)
        if isinstance(command, LazyCommand):
            real = command.load()
            self.commands[cmd_name] = real
            return real
        return command


def _engine(ctx: click.Context) -> Any:
    from .core import Engine

    obj = ctx.ensure_object(dict)
    if "engine" not in obj:
        obj["engine"] = Engine(use_cache=not obj.get("no_cache", False))
    return obj["engine"]


@click.group(cls=LazyGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="dlformula", message="dlformula %(version)s")
@click.option("--no-cache", is_flag=True,
              help="Rebuild the generated code instead of using the cache.")
@plugin_option
@click.pass_context
def cli(ctx: click.Context, no_cache: bool, plugin_paths: tuple[str, ...]) -> None:
    """A spreadsheet of named, documented formulas for planning distributed training.

    Every figure is a formula in a YAML file under formulas/; `dlformula explain NAME` shows how
    it is derived, `dlformula list` names them all.
    """
    ctx.ensure_object(dict)["no_cache"] = no_cache
    use_plugin_paths(ctx, plugin_paths)


config_option = click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False),
                             help="Config file whose numbers to substitute.")
set_option = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                          help="Override a config key, e.g. --set parallelism.tp=4 (repeatable).")
hf_option = click.option("--hf-config", type=click.Path(dir_okay=False),
                         help="Read the model shape from a Hugging Face config.json.")


@cli.command("eval")
@click.argument("config", type=click.Path(dir_okay=False))
@set_option
@hf_option
@click.option("--only", metavar="PATTERN",
              help="Only names matching PATTERN (a glob, a substring, or several separated "
                   "by commas).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--brief", is_flag=True, help="Only the key results (table format).")
@click.option("--breakdown", type=click.Choice(["layer"]),
              help="A per-sublayer roofline table of one transformer block.")
@click.pass_context
def eval_cmd(ctx: click.Context, config: str, sets: tuple[str, ...], hf_config: str | None,
             only: str | None, fmt: str, brief: bool, breakdown: str | None) -> None:
    """Evaluate every quantity for CONFIG.

    The table shows human units (GiB, TFLOP/s, ms, days) with the key results first; json, csv
    and yaml give raw values in each quantity's declared unit (SI: bytes, seconds, FLOP).
    """
    from .eval_command import eval_output

    warnings, text = eval_output(_engine(ctx), config, sets, hf_config, only, fmt, brief,
                                 breakdown)
    for line in warnings:
        click.echo(line, err=True)
    click.echo(text, nl=False)


@cli.command()
@click.argument("name")
@config_option
@set_option
@hf_option
@click.option("-d", "--depth", type=click.IntRange(min=0), help="Stop expanding below this depth.")
@click.option("--latex", is_flag=True, help="Also print each formula in LaTeX.")
@click.pass_context
def explain(ctx: click.Context, name: str, config_path: str | None, sets: tuple[str, ...],
            hf_config: str | None, depth: int | None, latex: bool) -> None:
    """Show how NAME is derived, down to the inputs (with a config's numbers if given)."""
    from .explain import explain as explain_fn

    engine = _engine(ctx)
    result = engine.evaluate(config_path, sets, hf_config) if config_path else None
    if result is None and sets:
        raise UsageError("--set needs a config: give one with -c CONFIG")
    click.echo(explain_fn(engine, name, result, depth, latex), nl=False)


@cli.command("list")
@click.argument("pattern", required=False)
@click.pass_context
def list_cmd(ctx: click.Context, pattern: str | None) -> None:
    """List inputs, constants and quantities (optionally matching PATTERN)."""
    from .report import _matches, _short

    m = _engine(ctx).model
    rows = []
    for name, d in m.inputs.items():
        if _matches(name, pattern):
            default = "required" if d.default is None else f"default {d.default}"
            rows.append((name, "input", d.unit, f"{d.config} ({default}). {d.doc}"))
    for name, c in m.constants.items():
        if _matches(name, pattern):
            rows.append((name, "constant", c.unit, f"{c.value:g}. {c.doc}"))
    for name in m.order:
        if _matches(name, pattern):
            q = m.quantities[name]
            rows.append((name, q.group, q.unit, q.doc))
    if not rows:
        raise UsageError(f"nothing matches '{pattern}'; `dlformula list` shows every name")
    for name, kind, unit, doc in rows:
        click.echo(f"{name:<32}{kind:<12}{unit:<14}{_short(doc, 90)}")


@cli.command()
@click.argument("name", required=False)
@click.option("--format", "fmt", type=click.Choice(["dot", "mermaid"]), default="dot",
              show_default=True)
@click.pass_context
def graph(ctx: click.Context, name: str | None, fmt: str) -> None:
    """Print the dependency graph (of NAME: what it uses and what uses it) as dot or mermaid."""
    from .graph import Graph, render

    m = _engine(ctx).model
    g = Graph.from_deps(m.deps, names=m.names())
    if name is not None:
        if name not in g.g:
            from .errors import did_you_mean

            raise UsageError(f"no name '{name}'{did_you_mean(name, m.names())}; "
                             "`dlformula list` shows them all")
        nodes = g.upstream(name) | g.downstream(name) | {name}
    else:
        nodes = set(g.g.nodes)
    kinds = {n: ("input" if n in m.inputs else "constant" if n in m.constants else "quantity")
             for n in nodes}
    click.echo(render(g.subgraph_edges(nodes), kinds, fmt, highlight=name), nl=False)


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True))
@click.pass_context
def check(ctx: click.Context, paths: tuple[str, ...]) -> None:
    """Check formula files (the installed ones, plus PATHS: files or folders of YAML)."""
    from .resources import extra_sources

    engine = _engine(ctx)
    sources = extra_sources(engine.sources, list(paths))
    fs = engine.load_formula_set(sources)
    click.echo(f"ok: {len(sources)} files, {len(fs.inputs)} inputs, {len(fs.constants)} "
               f"constants, {len(fs.quantities)} quantities, {len(fs.constraints)} constraints")


@cli.command()
@click.argument("name", required=False)
@click.pass_context
def hardware(ctx: click.Context, name: str | None) -> None:
    """List hardware node types, or show one node's figures and their sources."""
    from .report import hardware_table, node_details

    catalog = _engine(ctx).catalog
    if name:
        click.echo(node_details(catalog.node(name), catalog), nl=False)
    else:
        click.echo(hardware_table(catalog), nl=False)


@cli.command()
@click.argument("name", required=False)
@click.pass_context
def presets(ctx: click.Context, name: str | None) -> None:
    """List model presets, or show one preset's figures and source."""
    from .report import preset_details, preset_table

    catalog = _engine(ctx).catalog
    if name:
        click.echo(preset_details(catalog.preset(name), catalog), nl=False)
    else:
        click.echo(preset_table(catalog), nl=False)


for _name, (_module, _attr) in LAZY_COMMANDS.items():
    cli.add_command(LazyCommand(_name, _module, _attr))
cli.add_command(plugins_command)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI through click, turning every error into one line per problem and an exit
    code (launch.main is the program's entry point: it runs a plain `eval` without click)."""
    from .exits import guarded

    def run() -> int:
        try:
            with loaded_plugins(cli, argv):
                rv = cli.main(args=argv, prog_name="dlformula", standalone_mode=False)
            return rv if isinstance(rv, int) else 0
        except click.exceptions.NoSuchOption as exc:
            hint = f"; did you mean {exc.possibilities[0]}?" if exc.possibilities else ""
            click.echo(f"error: {exc.format_message()}{hint} (see --help)", err=True)
            return 2
        except click.UsageError as exc:
            cmd = exc.ctx.command_path if exc.ctx else "dlformula"
            click.echo(f"error: {exc.format_message()} (see `{cmd} --help`)", err=True)
            return 2
        except click.ClickException as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            return exc.exit_code
        except click.exceptions.Abort as exc:  # click's form of Ctrl-C (or of SIGTERM)
            from .atomic import Terminated

            return 143 if isinstance(exc.__context__, Terminated) else 130

    return guarded(run)


if __name__ == "__main__":
    sys.exit(main())
