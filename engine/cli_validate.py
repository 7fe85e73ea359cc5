"""`dlformula validate RUNS`: predict published training runs and report the errors.

Only click is imported at module level; the engine and the validation stage load when the
command runs (see dlformula.validation for the mapping from a run to a config).
"""

from __future__ import annotations

import click


@click.command("validate")
@click.argument("runs", required=False, metavar="RUNS")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="A table for people, or the JSON contract for tools.")
@click.option("--only", metavar="ID_PATTERN",
              help="Only runs whose id matches ID_PATTERN (glob, or a substring).")
@click.option("--show", "show_id", metavar="ID",
              help="Print the config run ID becomes, as YAML `dlformula eval` accepts, with "
                   "the assumptions as comments.")
@click.option("--list", "list_sets", is_flag=True,
              help="List the runs files that ship with dlformula.")
@click.pass_context
def validate(ctx: click.Context, runs: str | None, fmt: str, only: str | None,
             show_id: str | None, list_sets: bool) -> None:
    """Predict every run in RUNS and compare with what was measured.

    RUNS is a shipped set by name (`dlformula validate --list` names them, e.g. public) or
    the path of a YAML list of published runs in their schema: model shape, hardware,
    parallel layout, batch, precision, and a `target` block with step_time_s,
    memory_gib_peak and/or layer_fwd_bwd_ms. Each run becomes a config by the mapping in
    docs/validation.md, which reads the spellings sources use (nested model.moe blocks,
    top_k / topk / num_experts_per_tok, ...). The table shows predicted / target and the
    relative error, the runs the model cannot express with the reason, and the median, p90
    and max of |error| per target. `--format json` gives {"rows", "summary", "errors"}. A run
    that cannot be read is reported with its file:line (exit 2); the others are still
    predicted.
    """
    from .errors import ErrorGroup, UsageError
    from .validation import shipped

    if list_sets:
        click.echo(shipped.list_table(), nl=False)
        return
    if runs is None:
        raise UsageError("give a runs file or a shipped set, e.g. `dlformula validate public`"
                         " (`dlformula validate --list` shows the sets)")
    path = shipped.resolve(runs)
    from . import validate as validation
    from .core import Engine

    obj = ctx.ensure_object(dict)
    engine = obj.get("engine")
    if engine is None:
        engine = obj["engine"] = Engine(use_cache=not obj.get("no_cache", False))
    if show_id is not None:
        from .validation.show import show

        click.echo(show(engine, path, show_id), nl=False)
        return
    report = validation.validate(engine, path, only)
    text = validation.to_json(report) if fmt == "json" else validation.to_table(report)
    click.echo(text, nl=False)
    if report["errors"]:
        raise ErrorGroup([UsageError(e["message"], e["path"], e["line"])
                          for e in report["errors"]])
