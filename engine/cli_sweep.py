"""Commands `sweep`, `search` and `plot`: parse arguments, call the library, print.

Only click is imported here at module level: the CLI registers these commands on every start,
and NumPy, the engine and matplotlib load only when a command runs. Results go to stdout,
diagnostics (counts, timing, progress) to stderr; errors are raised as UsageError and printed
by `cli.main`.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click


def _engine(ctx: click.Context) -> Any:
    from .core import Engine

    obj = ctx.ensure_object(dict)
    if "engine" not in obj:
        obj["engine"] = Engine(use_cache=not obj.get("no_cache", False))
    return obj["engine"]


class Progress:
    """Progress on stderr. On a terminal, a bar redrawn in place once a run takes longer than a
    second; otherwise (a log, a pipe, a batch job) a plain line every `every` seconds once a run
    takes longer than that, so a long non-interactive sweep shows it is alive without flooding
    the log."""

    def __init__(self, stream: Any = None, delay: float = 1.0, force: bool = False,
                 every: float = 30.0) -> None:
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.delay = delay
        self.every = every
        self.tty = force or bool(getattr(self.stream, "isatty", lambda: False)())
        self.last = 0.0 if self.tty else self.start  # the last bar drawn or line written
        self.drawn = False
        self.first: tuple[float, int] | None = None

    def __call__(self, done: int, total: int) -> None:
        if done >= total:
            return
        now = time.perf_counter()
        if self.first is None:  # rates count from the first block, not from start-up
            self.first = (now, done)
        if self.tty:
            if now - self.start < self.delay or now - self.last < 0.1:
                return
        elif now - self.last < self.every:
            return
        self.last = now
        share = done / total if total else 1.0
        t0, d0 = self.first
        rate = (done - d0) / (now - t0) if now > t0 and done > d0 else 0.0
        eta = (total - done) / rate if rate else 0.0
        speed = f"{rate / 1e6:.2f} M/s, {eta:,.0f} s left" if rate else "starting"
        if not self.tty:
            self.stream.write(f"progress: {share * 100:.1f} % ({done:,} of {total:,} configs, "
                              f"{speed})\n")
            self.stream.flush()
            return
        bar = "#" * int(share * 30)
        self.stream.write(f"\r[{bar:<30}] {share * 100:5.1f} %  {done:,}/{total:,} configs  "
                          f"{speed} ")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()


set_option = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                          help="Override a config key, e.g. --set training.seq_len=4096.")
hf_option = click.option("--hf-config", type=click.Path(dir_okay=False),
                         help="Read the model shape from a Hugging Face config.json.")
output_option = click.option("-o", "--output", type=click.Path(dir_okay=False),
                             help="Write every row to a .csv, .json or .xlsx file.")
workers_option = click.option(
    "--workers", type=click.IntRange(min=1), default=None, metavar="N",
    help="Processes to run on (default: every core for a large grid, one for a small one).")
scheduler_option = click.option(
    "--scheduler", metavar="ADDRESS",
    help="Run on a Dask cluster, e.g. tcp://10.0.0.1:8786 (pip install 'dlformula[dask]'); "
         "the result is the one a single process gives.")
plot_option = click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
                           help="Also draw the result to an image (.png, .svg, .pdf); needs "
                                "matplotlib (pip install 'dlformula[plot]').")


@click.command("sweep")
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@click.option("--vary", multiple=True, metavar="KEY=VALUES",
              help="Values of a config key, crossed with every other --vary: 1,2,4 or 1..8 "
                   "(step 1), 0..1:0.25 (step), 1..64:x2 (doubling), words (full,selective), "
                   "hardware.node=h100-sxm,b200 or model.preset=... (repeatable).")
@click.option("--zip", "zipped", multiple=True, metavar="KEY=VALUES",
              help="Values that move together with every other --zip (same count), the group "
                   "crossed with the --vary axes (repeatable).")
@click.option("--where", multiple=True, metavar="EXPR",
              help="Keep rows where EXPR holds, e.g. 'memory_per_gpu < 0.9 * hbm_capacity' "
                   "(repeatable; unit names such as GiB or ms may appear).")
@set_option
@hf_option
@click.option("--columns", metavar="NAMES",
              help="Comma-separated names to report (default: the quantities with a `column:` "
                   "rank, as search shows them).")
@click.option("--sort", metavar="NAME", help="Order rows by NAME ('-NAME' for descending).")
@click.option("-n", "--limit", type=click.IntRange(min=0), default=20, show_default=True,
              help="Rows to print in the table format (the best ones with --sort; 0: all).")
@output_option
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True, help="Format on stdout (csv and json stream every row).")
@click.option("--keep-dp", is_flag=True,
              help="Keep the config's dp instead of filling the GPUs (dp = gpus/(tp*pp*cp)).")
@plot_option
@workers_option
@scheduler_option
@click.option("--max-configs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Refuse a grid of more than N configs (default: 1,000,000,000, which "
                   "--yes lifts).")
@click.option("--yes", is_flag=True, help="Run a grid larger than 1,000,000,000 configs.")
@click.option("--chunk-size", type=click.IntRange(min=1), default=None, hidden=True)
@click.pass_context
def sweep_cmd(ctx: click.Context, config: str | None, vary: tuple[str, ...],
              zipped: tuple[str, ...], where: tuple[str, ...], sets: tuple[str, ...],
              hf_config: str | None, columns: str | None, sort: str | None, limit: int,
              output: str | None, fmt: str, keep_dp: bool, plot_path: str | None,
              workers: int | None, scheduler: str | None, max_configs: int | None, yes: bool,
              chunk_size: int | None) -> None:
    """Evaluate CONFIG over a grid of values, vectorized, in chunks.

    Layouts that break a constraint are dropped and counted by reason. Unless --keep-dp, dp
    fills the GPU count when tp, pp, cp or hardware.gpus vary. Values in csv/json are in each
    name's declared unit (`dlformula list`); the table shows human units.
    """
    from .errors import UsageError
    from .sweep import CHUNK_SIZE, sweep

    if not vary and not zipped:
        raise UsageError("give at least one --vary KEY=VALUES, e.g. --vary parallelism.tp=1,2,4,8")
    stream = None
    if output is None and fmt != "table":
        stream, target = sys.stdout, sys.stdout
    else:
        target = output
    progress = Progress()
    try:
        table = sweep(config, vary=vary, paired=zipped, where=where, sets=sets,
                      columns=columns.split(",") if columns else None, sort=sort,
                      top=None if plot_path or target is not None else (limit or None),
                      output=target, fmt=fmt if stream is not None else None,
                      engine=_engine(ctx), hf_config=hf_config,
                      chunk_size=chunk_size or CHUNK_SIZE, progress=progress,
                      fill_dp=not keep_dp, keep=target is None or plot_path is not None,
                      workers=workers, scheduler=scheduler, max_configs=max_configs, yes=yes)
    finally:
        progress.close()
    _report_sweep(table, target is None, output, limit)
    if plot_path:
        from .plot import plot_sweep

        y = sort.lstrip("-+") if sort else None
        plot_sweep(table, plot_path, y=y)
        click.echo(f"wrote {plot_path}", err=True)


def _report_sweep(table: Any, on_stdout: bool, output: str | None, limit: int) -> None:
    """The table and the summary on stdout, or (rows streamed elsewhere) the summary on
    stderr."""
    summary = table.stats.summary()
    if on_stdout:
        if len(table):
            click.echo(table.format(limit=limit or None), nl=False)
        else:
            click.echo("No config is left.")
        if table.stats.kept > len(table):
            click.echo(f"({len(table):,} of {table.stats.kept:,} rows shown; -o FILE writes "
                       "them all)")
        click.echo(summary)
    else:
        if output:
            click.echo(f"wrote {table.stats.kept:,} rows to {output}", err=True)
        click.echo(summary, err=True)


@click.command("search")
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@click.option("--gpus", metavar="N[,N...]",
              help="GPU count(s) to lay out (default: the config's hardware.gpus).")
@click.option("--objective", default="step_time", show_default=True, metavar="NAME",
              help="Quantity to rank by: step_time, cost_usd, mfu, tokens_per_second, "
                   "training_days, memory_per_gpu ... ('max:NAME'/'min:NAME' set the direction).")
@click.option("-k", "--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Layouts to show.")
@click.option("--pareto", metavar="OBJ1,OBJ2",
              help="Also show the Pareto front of these objectives, e.g. step_time,memory_per_gpu.")
@click.option("--fix", multiple=True, metavar="KEY=VALUES",
              help="Limit a searched key to these values, e.g. --fix parallelism.pp=8 or "
                   "--fix training.recompute=selective,full (repeatable).")
@set_option
@hf_option
@click.option("--max-memory", type=float, default=1.0, show_default=True, metavar="SHARE",
              help="Share of the accelerator's memory a layout may use, e.g. 0.9.")
@output_option
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True, help="table: ranked layouts and a recommendation; csv/json: "
                                      "every layout that fits, ranked.")
@plot_option
@workers_option
@scheduler_option
@click.pass_context
def search_cmd(ctx: click.Context, config: str | None, gpus: str | None, objective: str,
               top: int, pareto: str | None, fix: tuple[str, ...], sets: tuple[str, ...],
               hf_config: str | None, max_memory: float, output: str | None, fmt: str,
               plot_path: str | None, workers: int | None, scheduler: str | None) -> None:
    """Find the best parallel layouts of CONFIG's model for N GPUs.

    Every tp x pp x cp x dp factorisation of the GPU count, with every vpp, micro-batch, ZeRO
    stage, recompute mode (and ep and pipeline schedule when the model has them) is checked
    against the model's constraints and the accelerator's memory, then ranked. The config's own
    layout is ignored unless fixed with --fix.
    """
    from .search import search

    counts = _gpu_counts(gpus) if gpus else None
    every = bool(output or plot_path or fmt != "table")  # else only the best `top` are held
    result = search(config, gpus=counts, objective=objective, pareto=pareto, fix=fix, sets=sets,
                    engine=_engine(ctx), hf_config=hf_config, max_memory=max_memory,
                    top=None if every else top, workers=workers, scheduler=scheduler)
    stats = result.stats
    if output:
        result.write(output)
        click.echo(f"wrote {len(result):,} layouts to {output}", err=True)
    if fmt != "table":
        result.write(sys.stdout, fmt)
        click.echo(stats.summary("layouts"), err=True)
    else:
        click.echo(_search_report(result, top), nl=False)
    if plot_path:
        from .plot import plot_search

        plot_search(result, plot_path)
        click.echo(f"wrote {plot_path}", err=True)


def _gpu_counts(text: str) -> list[int]:
    from .errors import UsageError
    from .sweep import parse_values

    values = parse_values(text, "--gpus")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
        raise UsageError(f"--gpus {text}: give whole GPU counts, e.g. --gpus 64 or "
                         "--gpus 256,512,1024 or --gpus 64..1024:x2")
    return values


def _search_report(result: Any, top: int) -> str:
    import numpy as np

    from .table import Table

    config = result.config
    what = []
    if config is not None and config.preset is not None:
        what.append(config.preset.id)
    node = config.node.id if config is not None and config.node is not None else "GPUs"
    counts = "/".join(f"{g:,}" for g in result.stats.gpus)
    what.append(f"{counts} x {node}")
    direction = "higher" if result.descending else "lower"
    lines = [f"Search: {' on '.join(what)}; objective {result.objective} ({direction} is "
             "better)", result.stats.summary("layouts"), ""]
    from .display import headers, result_columns
    from .search import LIMITED_BY

    model = result.model
    shown = [c for c in [*result.layout, result.objective, *result_columns(model), LIMITED_BY]
             if c in result]
    shown = list(dict.fromkeys(shown))  # each column once, where it first comes
    titles = {**headers(model, result.columns), LIMITED_BY: "limited by"}

    def view(t: Any) -> Any:
        return Table({k: t[k] for k in shown}, t.decoders, t.units, percent=t.percent)

    if len(result):
        ranked = view(result.head(top))
        ranked.columns = {"rank": np.arange(1, len(ranked) + 1), **ranked.columns}
        lines.append(ranked.format(limit=None, headers=titles).rstrip("\n"))
        fitting = result.stats.kept
        if fitting > top:
            lines.append(f"... {fitting - top:,} more layouts fit (-k N shows more, "
                         "-o FILE writes them all)")
        lines.append("")
    if result.pareto is not None and len(result.pareto):
        names = [c for c in [*shown[:len(result.layout)], *result.pareto_objectives, *shown]
                 if c in result.pareto]
        names = list(dict.fromkeys(names))
        lines.append(f"Pareto front ({len(result.pareto)} layouts no other layout beats on "
                     "every objective):")
        front = Table({k: result.pareto[k] for k in names}, result.decoders, result.units,
                      percent=result.percent)
        lines.append(front.format(limit=None, headers=titles).rstrip("\n"))
        lines.append("")
    lines.extend(result.recommendation)
    return "\n".join(lines) + "\n"


# -- plot -------------------------------------------------------------------------------------
@click.group("plot")
def plot_cmd() -> None:
    """Draw charts to an image file (needs matplotlib: pip install 'dlformula[plot]')."""


def _plot_output(default: str) -> Any:
    return click.option("-o", "--output", type=click.Path(dir_okay=False), default=default,
                        show_default=True, help="Image file (.png, .svg, .pdf).")


def _breakdown_command(name: str, quantity: str, default_output: str, example: str,
                       doc: str) -> None:
    """Register `plot NAME`: stacked bars of QUANTITY's parts, one bar per --vary value."""

    @plot_cmd.command(name, help=doc)
    @click.argument("config", type=click.Path(dir_okay=False))
    @set_option
    @click.option("--vary", metavar="KEY=VALUES", help=f"One bar per value, e.g. {example}.")
    @_plot_output(default_output)
    @click.pass_context
    def command(ctx: click.Context, config: str, sets: tuple[str, ...], vary: str | None,
                output: str) -> None:
        from .plot import plot_breakdown

        plot_breakdown(_engine(ctx), config, quantity, output, sets, vary)
        click.echo(f"wrote {output}", err=True)


_breakdown_command("memory", "memory_per_gpu", "memory.png", "parallelism.tp=1,2,4,8",
                   "Memory per GPU, broken down into its parts (weights, gradients, optimizer, "
                   "activations).")
_breakdown_command("time", "step_time", "step_time.png", "parallelism.pp=1,2,4,8",
                   "Step time, broken down into compute, bubble, exposed communication and "
                   "optimizer.")


@plot_cmd.command("sweep")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--vary", multiple=True, required=True, metavar="KEY=VALUES",
              help="One axis: a line; two axes: a heatmap.")
@click.option("--where", multiple=True, metavar="EXPR", help="Leave out rows (blank cells).")
@set_option
@click.option("-y", "--y", "y", default="step_time", show_default=True, metavar="NAME",
              help="Quantity to plot.")
@_plot_output("sweep.png")
@click.pass_context
def plot_sweep_cmd(ctx: click.Context, config: str, vary: tuple[str, ...],
                   where: tuple[str, ...], sets: tuple[str, ...], y: str, output: str) -> None:
    """A quantity over one swept key (line) or two (heatmap)."""
    from .plot import plot_sweep
    from .sweep import sweep

    table = sweep(config, vary=vary, where=where, sets=sets, columns=[y],
                  engine=_engine(ctx))
    plot_sweep(table, output, y=y)
    click.echo(f"wrote {output}", err=True)


@plot_cmd.command("search")
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@click.option("--gpus", metavar="N[,N...]", help="GPU count(s) (default: the config's).")
@click.option("--objective", default="step_time", show_default=True, metavar="NAME")
@click.option("-x", "--x", "x", default="memory_per_gpu", show_default=True, metavar="NAME",
              help="Quantity on the horizontal axis.")
@click.option("--fix", multiple=True, metavar="KEY=VALUES")
@set_option
@_plot_output("search.png")
@click.pass_context
def plot_search_cmd(ctx: click.Context, config: str | None, gpus: str | None, objective: str,
                    x: str, fix: tuple[str, ...], sets: tuple[str, ...], output: str) -> None:
    """Every layout that fits: objective against memory (or -x NAME), Pareto front marked."""
    from .plot import plot_search
    from .search import search

    result = search(config, gpus=_gpu_counts(gpus) if gpus else None, objective=objective,
                    fix=fix, sets=sets, engine=_engine(ctx), columns=[x])
    plot_search(result, output, x=x)
    click.echo(f"wrote {output}", err=True)


COMMANDS = [sweep_cmd, search_cmd, plot_cmd]
