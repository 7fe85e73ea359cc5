"""The best feasible value of knobs a run leaves out, by the project's own layout search.

Published runs are tuned, so a knob a run does not report (and no published recipe gives) is
taken at the value `dlformula search` ranks first for the stated layout: every other setting
of the run fixed, only the knobs left out varied, among the layouts that run and fit in memory.
"""

from __future__ import annotations

import weakref
from typing import Any

# engine -> (the mapped config, the knobs) -> the values chosen; the same run is often mapped
# several times in one process (validate, --show, the docs).
# Marks a choice made with memory unbounded (no value fitted the model's estimate).
OVER_MEMORY = "(over memory)"
UNBOUNDED = 1e30  # bytes: no memory limit
_CACHE: weakref.WeakKeyDictionary[Any, dict[Any, dict[str, Any] | None]] = \
    weakref.WeakKeyDictionary()


def best_feasible(engine: Any, sets: dict[str, Any], knobs: list[str]) -> dict[str, Any] | None:
    """{knob: value} for the layout `search` ranks first by step time with every setting of
    `sets` fixed but `knobs`; None when no value runs and fits (or the config cannot be read)."""
    from ..errors import DlfError
    from ..search import search

    cache = _CACHE.setdefault(engine, {})
    key = (tuple(sorted((k, _text(v)) for k, v in sets.items())), tuple(knobs))
    if key in cache:
        return cache[key]
    given = {k: v for k, v in sets.items() if k not in knobs}
    by_key = {d.config: d for d in engine.model.inputs.values() if d.config}
    try:
        config = engine.config(None, given, check_layout=False)
        # Every setting of the run but the knobs, as typed values (a choice by its label).
        fix = {k: [config.labels.get(d.name, config.values[d.name])]
               for k, d in by_key.items()
               if k.split(".")[0] in ("parallelism", "training", "moe") and k not in knobs
               and d.name in config.values}
        result = search(None, gpus=int(config.values["gpus"]), sets=given, fix=fix,
                        engine=engine, top=1)
        best = result.best()
        if best is None:
            # The run ran, so it fit: when the model's memory estimate fits no value, its
            # estimate is what is off for this run, and the fastest value is taken.
            result = search(None, gpus=int(config.values["gpus"]),
                            sets={**given, "hardware.hbm_capacity": UNBOUNDED}, fix=fix,
                            engine=engine, top=1)
            best = result.best()
            if best is not None:
                best = {**best, OVER_MEMORY: True}
    except DlfError:
        best = None
    chosen = None if best is None else {
        k: _plain(best[by_key[k].name], by_key[k]) for k in knobs if by_key[k].name in best}
    if chosen is not None and best is not None and best.get(OVER_MEMORY):
        chosen[OVER_MEMORY] = True
    cache[key] = chosen
    return chosen


def _plain(value: Any, d: Any) -> Any:
    """A search column value as the config writes it (a choice's label, an integer)."""
    if d.choices:
        return next((label for label, code in d.choices if code == value), value)
    if d.domain.kind == "boolean":
        return bool(value)
    return int(value) if float(value) == int(value) else float(value)


def _text(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)
