"""`dlformula export CONFIG -o plan.xlsx`: the live Excel workbook (see excel.py).

Only click is imported here at module level: the exporter pulls in openpyxl and sympy, which the
rest of the CLI's start-up path must not pay for.
"""

from __future__ import annotations

import click


@click.command("export")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="plan.xlsx",
              show_default=True, help="Workbook to write (.xlsx).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a config key, e.g. --set parallelism.tp=4 (repeatable).")
@click.option("--hf-config", type=click.Path(dir_okay=False),
              help="Read the model shape from a Hugging Face config.json.")
@click.pass_context
def export(ctx: click.Context, config: str, output: str, sets: tuple[str, ...],
           hf_config: str | None) -> None:
    """Write a live Excel workbook for CONFIG.

    Every estimate is a spreadsheet formula over named cells (a defined name per input and
    quantity), so changing an input on the Inputs sheet, or the node type in its drop-down,
    recomputes every figure. Sheets: About, Summary (with charts), Inputs, Hardware, one per
    formula file, Checks.
    """
    import time

    from .core import Engine
    from .excel import export as export_workbook

    obj = ctx.ensure_object(dict)
    engine = obj.get("engine")
    if engine is None:
        engine = obj["engine"] = Engine(use_cache=not obj.get("no_cache", False))
    start = time.perf_counter()
    info = export_workbook(engine, config, output, sets, hf_config)
    seconds = time.perf_counter() - start
    click.echo(f"wrote {info.path}: {len(info.sheets)} sheets, {len(info.cells)} named cells "
               f"({seconds:.2f} s)")
