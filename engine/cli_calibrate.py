"""`dlformula calibrate RUNS --node BASE -o NODE.yaml`: a hardware node fitted to measured runs.

Only click is imported at module level; the engine and the fit load when the command runs
(engine/calibrate.py).
"""

from __future__ import annotations

import click


@click.command("calibrate")
@click.argument("runs", metavar="RUNS")
@click.option("--node", "base", required=True, metavar="BASE",
              help="The node the runs ran on, whose figures are fitted (dlformula hardware), "
                   "or a node file calibrate wrote, to calibrate again on new runs.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Where to write the calibrated node YAML.")
@click.option("--fit", "fit", metavar="NAME,...",
              help="Figures to fit (hardware inputs: gemm_efficiency, attention_efficiency, "
                   "...). Default: the figures validation fits for the node's hardware family "
                   "(the GEMM figure, the attention figures the family ties to it following "
                   "it), those the runs determine.")
@click.option("--force", is_flag=True,
              help="Write the fitted figures even when they predict the runs they were left out "
                   "of no better than BASE does (by default BASE's figures are kept then).")
@click.pass_context
def calibrate_cmd(ctx: click.Context, runs: str, base: str, output: str, fit: str | None,
                  force: bool) -> None:
    """Fit a node's efficiency figures to your own measured runs.

    RUNS is a runs file in the schema of the shipped sets (`dlformula validate --list`), or a
    set's name; its runs on node BASE are fitted by least squares on log step time. Prints each
    run's error before and after, and left out (predicted with the figures refitted on the
    other runs), and writes a node file derived from BASE -- every figure kept with its
    source, the fitted ones marked with the runs they came from -- that a config uses as
    `hardware: {node: ./NODE.yaml}` or a plugin ships in its hardware/ folder. The fitted
    figures are written only if they predict the runs they were left out of better than BASE
    (median |error| half a point lower, worst run no worse, most runs better); otherwise
    BASE's are kept.
    """
    from .calibrate import calibrate, node_yaml, report
    from .core import Engine
    from .validation.shipped import resolve

    obj = ctx.ensure_object(dict)
    engine = obj.get("engine") or Engine(use_cache=not obj.get("no_cache", False))
    figures = [f.strip() for f in fit.split(",") if f.strip()] if fit else None
    cal = calibrate(engine, resolve(runs), base, figures, force)
    text = node_yaml(engine, cal)
    from .atomic import write_file

    write_file(output, lambda fh: fh.write(text), binary=False)
    click.echo(report(cal), nl=False)
    click.echo(f"wrote {output}: use it as `hardware: {{node: {output}}}`")
