"""`dlformula validate RUNS.yaml`: predict published training runs and report the errors.

Only click is imported at module level; the engine and the validation stage load when the
command runs (see validate.py for the mapping from a run to a config).
"""

from __future__ import annotations

import click


@click.command("validate")
@click.argument("runs", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="A table for people, or the JSON contract for tools.")
@click.option("--only", metavar="ID_PATTERN",
              help="Only runs whose id matches ID_PATTERN (glob, or a substring).")
@click.pass_context
def validate(ctx: click.Context, runs: str, fmt: str, only: str | None) -> None:
    """Predict every run in RUNS and compare with what was measured.

    RUNS is a YAML list of published runs (the schema of the shipped runs/public.yaml):
    model shape, hardware, parallel layout, batch, precision, and a `target` block with
    step_time_s, memory_gib_peak and/or layer_fwd_bwd_ms. Each run becomes a config by the
    mapping in docs/validation.md; the table shows predicted / target and the relative error,
    the runs the model cannot express with the reason, and the median, p90 and max of
    |error| per target. `--format json` gives {"rows": [...], "summary": {...}}.
    """
    from . import validate as validation
    from .core import Engine

    obj = ctx.ensure_object(dict)
    engine = obj.get("engine")
    if engine is None:
        engine = obj["engine"] = Engine(use_cache=not obj.get("no_cache", False))
    report = validation.validate(engine, runs, only)
    text = validation.to_json(report) if fmt == "json" else validation.to_table(report)
    click.echo(text, nl=False)
