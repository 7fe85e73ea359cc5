"""What `dlformula eval` does, without click: shared by click's `eval` command (cli.py) and the
fast path that runs a plain `eval` without importing click (launch.py)."""

from __future__ import annotations

from typing import Any

from .errors import UsageError

FORMATS = ["table", "json", "csv", "yaml"]


def eval_output(engine: Any, config: str, sets: list[str] | tuple[str, ...],
                hf_config: str | None, only: str | None, fmt: str, brief: bool,
                breakdown: str | None) -> tuple[list[str], str]:
    """(warning lines for stderr, text for stdout) of `dlformula eval`."""
    from . import report
    from .cli_args import parse_set

    if fmt != "table" and (brief or breakdown):
        option = "--brief" if brief else "--breakdown"
        raise UsageError(f"{option} prints a table for people, so it does not combine with "
                         f"--format {fmt}; drop one of them (--only PATTERN chooses the names "
                         f"of a {fmt} report)")
    result = engine.evaluate(config, parse_set(sets), hf_config)
    warnings = [f"warning: {message}" for message in result.model.warnings(result.values)]
    if brief:
        return warnings, "\n".join(report.key_results(result)) + "\n"
    if breakdown:
        return warnings, report.layer_breakdown(result)
    if only and not report.matches_any(result, only):
        raise UsageError(f"--only {only!r} matches no quantity, input or constant; `dlformula "
                         "list` names them (PATTERN is a glob such as 'dp_*', a substring, or "
                         "several separated by commas)")
    writer = {"table": report.to_table, "json": report.to_json, "csv": report.to_csv,
              "yaml": report.to_yaml}[fmt]
    text = writer(result, only)
    return warnings, text if text.endswith("\n") else text + "\n"
