"""`dlformula validate RUNS --show ID`: the config one run becomes, as a config file.

The text is YAML that `dlformula eval` reads unchanged (sections of keys, hardware figures with
their units as written) and evaluates to the prediction `validate` makes; the assumptions the
mapping made, the targets and the prediction are comments.
"""

from __future__ import annotations

from typing import Any

from ..errors import DlfError, UsageError, display_path, raise_all
from .mapping import Invalid, Skip, check_types, map_row
from .report import _figures, _matches, _stages, _targets, context
from .runsfile import Row, load_runs


def show(engine: Any, path: str, run_id: str) -> str:
    """The config of run `run_id` (an exact id, or a pattern matching one run)."""
    errors: list[DlfError] = []
    runs = {str(r.value["id"].value): r for r in load_runs(path, [])}
    dpath = display_path(path)
    matching = [run_id] if run_id in runs else [i for i in runs if _matches(i, run_id)]
    if not matching:
        raise UsageError(f"--show '{run_id}' matches no run id in {dpath}")
    if len(matching) > 1:
        ids = ", ".join(matching[:5])
        raise UsageError(f"--show '{run_id}' matches {len(matching)} runs ({ids}"
                         f"{', ...' if len(matching) > 5 else ''}); give one id")
    row = Row(runs[matching[0]], dpath, errors)
    targets = _targets(row) or {}
    try:
        mapped = map_row(row, context(engine))
    except Skip as exc:
        raise UsageError(f"run '{row.id}' is skipped: {exc}", dpath, row.line) from None
    except Invalid:
        check_types(row)
        raise_all(errors)
        raise
    if row.problems:
        raise_all(errors)
    lines = [f"# Run '{row.id}' of {dpath}: the config it becomes.",
             "# dlformula eval accepts this file unchanged: dlformula eval FILE --brief"]
    notes = list(mapped.assumptions)
    try:
        result = engine.evaluate(None, mapped.values)
        predicted = _figures(result)
        notes += _stages(result)
        for key, target in targets.items():
            lines.append(f"# {key}: predicted {predicted[key]:.4g}, target {target:.4g} "
                         f"({(predicted[key] - target) / target * 100:+.1f}%)")
    except DlfError as exc:
        lines.append(f"# dlformula eval refuses it: {' '.join(str(exc).split())}")
    if notes:
        lines.append("# assumptions:")
        lines += [f"#   - {note}" for note in notes]
    return "\n".join(lines) + "\n" + config_yaml(mapped.values)


def config_yaml(values: dict[str, Any]) -> str:
    """Config keys as a config file: one mapping per section, in the order they were set."""
    from ..yamlfile import dump_yaml

    sections: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        section, name = key.split(".", 1)
        sections.setdefault(section, {})[name] = value
    order = ["model", "mla", "moe", "hardware", "parallelism", "training"]
    ordered = {s: sections[s] for s in order if s in sections}
    ordered.update({s: v for s, v in sections.items() if s not in ordered})
    return dump_yaml(ordered)
