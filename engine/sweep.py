"""Sweeps: many configs through the vectorized evaluator, block by block.

A sweep is a grid. Each `--vary KEY=VALUES` is one dimension; all `--zip` axes together form one
more (their values move in step); the grid is their cartesian product (sweep_axes.py reads the
axes). It is never materialised: sweep_run.py cuts it into blocks and runs each through the
constraints, the pruned generated code and the `--where` filters (`Where`, here); the rows go to
a sink that keeps them, keeps the best K, or streams them to a file. Memory is bounded by the
block, whatever the grid. Blocks run in this process or, in ranges, on worker processes or a
Dask cluster (parallel.py), with the same result.

Everything here is also the Python API: `sweep(...)` returns a `Table` (`table.py`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from .errors import UsageError, did_you_mean
from .sweep_axes import (  # noqa: F401  (the sweep API, re-exported)
    MAX_AXIS_VALUES,
    SPECIAL_KEYS,
    Axis,
    _specs,
    build_axes,
    check_key,
    input_by_key,
    parse_values,
    split_spec,
    value_codes,
)
from .sweep_run import (  # noqa: F401
    CHUNK_SIZE,
    GPUS_NOT_DIVISIBLE,
    Evaluator,
    Grid,
    Plan,
    Stats,
    _fills_dp,
    _flat,
    _Keeper,
    functions_for,
    process_block,
)
from .sweep_where import Where
from .table import Table, number_text, open_writer, percent_names

MAX_CONFIGS = 10**9  # a larger sweep asks for --yes or --max-configs first
FITS = "fits_memory"  # the column marking rows whose memory_per_gpu exceeds hbm_capacity

Progress = Callable[[int, int], None]


_PLACEHOLDER = re.compile(r"\{([A-Za-z][A-Za-z0-9_]*)\}")


def _check_fixed_constraints(model: Any, values: Mapping[str, Any], varied: set[str]) -> None:
    """A constraint no axis can change, broken by the base config, would reject every config:
    say so, with the constraint's own message, instead of sweeping for nothing."""
    from .errors import raise_all

    broken = [(c, names) for ok, c, names in zip(model.check(dict(values)), model.constraints,
                                                 model.constraint_names, strict=False)
              if not ok and not set(names) & varied]
    if not broken:
        return
    try:
        shown = model.evaluate(dict(values))
    except Exception:  # a broken layout may not evaluate; fill from the inputs alone
        shown = dict(values)

    def fill(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in shown:
            return m.group(0)
        d = model.inputs.get(name)
        v = d.label(shown[name]) if d is not None else shown[name]
        return number_text(float(v)) if isinstance(v, (int, float)) and not isinstance(
            v, bool) else str(v)

    raise_all([UsageError("every config breaks a constraint no axis changes: "
                          + _PLACEHOLDER.sub(fill, c.message)) for c, _ in broken])


def default_columns(model: Any) -> list[str]:
    """The columns a sweep shows unless asked for others: the quantities whose formula file
    gives them a `column:` rank (search's result columns, a plugin's included), by rank; a
    model without any shows its key results (`summary:`)."""
    from .display import result_columns

    return result_columns(model) or list(model.summary)


def check_names(model: Any, names: Iterable[str], option: str) -> list[str]:
    known = [*model.inputs, *model.constants, *model.order]
    out = []
    for n in names:
        n = n.strip()
        if n and n not in known:
            raise UsageError(f"{option} {n}: no such name{did_you_mean(n, known)}; "
                             "`dlformula list` shows them")
        if n and n not in out:
            out.append(n)
    return out


def sweep(config: str | None, vary: Any = (), paired: Any = (), where: Any = (),
          sets: Iterable[str] = (), columns: Iterable[str] | None = None,
          sort: str | None = None, top: int | None = None, output: Any = None,
          fmt: str | None = None, engine: Any = None, hf_config: str | None = None,
          chunk_size: int = CHUNK_SIZE, progress: Progress | None = None,
          keep: bool = True, fill_dp: bool = True, workers: int | None = 1,
          scheduler: Any = None, max_configs: int | None = None, yes: bool = False) -> Table:
    """Evaluate a grid of configs around a base config, chunk by chunk.

    `vary` (crossed) and `paired` (moving together, the CLI's --zip): ["parallelism.tp=1,2,4,8",
    ...] or {"parallelism.tp": [1, 2, 4, 8]}.
    `where`: filters such as "memory_per_gpu < 0.9 * hbm_capacity". `columns`: names to report
    (default: the quantities with a `column:` rank, `default_columns`). `sort`: a column,
    '-name' for descending; with `top`, only the best `top` rows are kept (memory stays
    bounded however large the grid). `output`: a path (.csv/.json/.xlsx) or text stream
    receiving every kept row as it is computed.
    With `fill_dp` (the default), when tp, pp, cp or the GPU count vary and dp does not, each
    row's dp is the GPU count over tp x pp x cp, as a planner holding the GPUs fixed expects.
    Returns a `Table` (with `.stats`); with keep=False it holds no rows (streaming only).
    `workers`: processes to run the blocks on (None: every core for a large grid, one for a
    small one); `scheduler`: a Dask scheduler address (or `distributed.Client`) to run them
    on a cluster. Either way the result is the one a single process gives. A grid of more
    than MAX_CONFIGS configs needs `yes=True`, or `max_configs` at least its size.
    """
    if engine is None:
        from .core import Engine

        engine = Engine()
    model = engine.model
    base, axes, dims = _grid_axes(engine, config, vary, paired, sets, hf_config)
    shown = [a.column for a in axes]
    outputs, sort_name, descending = _outputs(model, columns, sort, shown)
    filters = [Where(w, model) for w in ([where] if isinstance(where, str) else where or ())]
    fill = fill_dp and _fills_dp(model, axes)
    _check_fixed_constraints(model, base.values, {n for a in axes for n in a.codes}
                             | ({"dp"} if fill else set()))
    ev = Evaluator(model, base.values, outputs, filters)
    units, decoders = _labels(model, outputs, axes)
    filled = ["dp"] if fill and "dp" not in outputs else []
    outputs[:0] = filled
    names = shown + outputs
    marks = "memory_per_gpu" in outputs and "hbm_capacity" in model.inputs
    if marks:  # a layout that does not fit in memory is marked, not hidden
        names.append(FITS)
        decoders[FITS] = {0: "no", 1: "yes"}
    grid = Grid(dims, chunk_size)
    _check_size(grid.total, max_configs, yes)
    plan = Plan({k: float(v) for k, v in base.values.items()}, dims, chunk_size, outputs, names,
                [w.text for w in filters], fill, top, sort_name, descending,
                every_row=output is not None, marks=marks)
    writer = open_writer(output, names, decoders, units, fmt) if output is not None else None
    keeper = _Keeper(top, sort_name, descending)
    stats = Stats()
    start_time = time.perf_counter()
    _execute(engine, ev, plan, grid, stats, writer, keeper if keep else None, workers,
             scheduler, progress)
    stats.seconds = time.perf_counter() - start_time
    merged = keeper.merged() if keep else {}
    if not merged:
        merged = {k: np.empty(0) for k in names}
    table = Table(merged, decoders, units, stats, percent_names(model))
    if sort_name:
        table = table.sort(sort_name, descending)
    if top is not None:
        table = table.head(top)
    table.config = base
    table.axes = shown
    table.filled = filled
    return table


def _grid_axes(engine: Any, config: str | None, vary: Any, paired: Any, sets: Iterable[str],
               hf_config: str | None) -> tuple[Any, list[Axis], list[list[Axis]]]:
    """The base config, every axis, and the grid's dimensions (crossed axes one each, the
    --zip axes together as one)."""
    vary_specs, zip_specs = _specs(vary, "--vary"), _specs(paired, "--zip")
    if zip_specs and len({len(v) for _, v in zip_specs}) > 1:
        counts = ", ".join(f"{k} has {len(v)}" for k, v in zip_specs)
        raise UsageError(f"--zip axes move together, so they need the same number of values "
                         f"({counts})")
    zipped = {k for k, _ in zip_specs}
    base, axes = build_axes(engine, config, sets, vary_specs + zip_specs, "--vary", hf_config,
                            zipped)
    dims: list[list[Axis]] = [[a] for a in axes if a.key not in zipped]
    if zipped:
        dims.append([a for a in axes if a.key in zipped])
    return base, axes, dims


def _outputs(model: Any, columns: Iterable[str] | None, sort: str | None,
             shown: list[str]) -> tuple[list[str], str | None, bool]:
    """The names reported beside the axes (and the sort key, if not among them)."""
    outputs = check_names(model, list(columns) if columns is not None
                          else default_columns(model), "--columns")
    descending = bool(sort and sort.startswith("-"))
    sort_name = sort.lstrip("-+") if sort else None
    outputs = [n for n in outputs if n not in shown]
    if sort_name and sort_name not in shown + outputs:
        outputs += check_names(model, [sort_name], "--sort")
    return outputs, sort_name, descending


def _labels(model: Any, outputs: list[str], axes: list[Axis]) -> tuple[dict[str, str],
                                                                      dict[str, dict]]:
    """Every name's unit, and the labels of the choice columns."""
    units = {**{n: d.unit for n, d in model.inputs.items()},
             **{n: q.unit for n, q in model.quantities.items()},
             **{n: c.unit for n, c in model.constants.items()}}
    decoders: dict[str, dict] = {}
    for name in outputs:
        d = model.inputs.get(name)
        if d is not None and d.choices:
            decoders[name] = {c: lab for lab, c in d.choices}
    for a in axes:
        if a.decoder is not None:
            decoders[a.column] = a.decoder
    return units, decoders


def _execute(engine: Any, ev: Evaluator, plan: Plan, grid: Grid, stats: Stats, writer: Any,
             keeper: Any, workers: int | None, scheduler: Any,
             progress: Progress | None) -> None:
    """Run every block (here, on local processes or on a Dask cluster) into the writer and the
    keeper; a sweep that fails or is stopped leaves no partial file."""

    def sink(rows: dict[str, np.ndarray] | None) -> None:
        if rows is None:
            return
        if writer is not None:
            writer.write(rows)
        if keeper is not None and not keeper.full():
            keeper.add(rows)

    finished = False
    try:
        from .parallel import workers_for

        n_workers = workers_for(workers, scheduler, grid.total)
        if n_workers > 1 or scheduler is not None:
            _run_parallel(engine, plan, grid, stats, sink, n_workers, scheduler, progress)
        else:
            done = 0
            for b in range(grid.count):
                sink(process_block(ev, plan, grid, b, stats))
                done += grid.size_of(b)
                if progress is not None:
                    progress(done, grid.total)
        finished = True
    finally:
        if writer is not None:
            if finished:
                writer.close()
            else:
                writer.abort()


def _check_size(total: int, max_configs: int | None, yes: bool) -> None:
    """A grid above MAX_CONFIGS (or the caller's own limit) runs only when asked for."""
    limit = MAX_CONFIGS if max_configs is None else max_configs
    if total > limit and not (yes and max_configs is None):
        which = (f"--max-configs {max_configs:,}" if max_configs is not None
                 else f"the limit of {MAX_CONFIGS:,}")
        raise UsageError(f"the grid has {total:,} configs, more than {which}; narrow the "
                         "axes, or run it anyway with --yes (or raise --max-configs)")


def _run_parallel(engine: Any, plan: Plan, grid: Grid, stats: Stats, sink: Any, workers: int,
                  scheduler: Any, progress: Progress | None) -> None:
    """The blocks in ranges on worker processes (or a Dask cluster), the rows sunk in grid
    order: the same rows, counts and order as one process gives."""
    from .parallel import model_spec, run_tasks, task_ranges

    ranges = task_ranges(grid.count, grid.total // max(grid.count, 1), workers)
    done = 0
    for (first, last), (part, rows) in zip(ranges, run_tasks(
            _sweep_task, (model_spec(engine.model), plan), ranges, workers, scheduler),
            strict=True):
        stats.add(part)
        sink(rows)
        done += sum(grid.size_of(b) for b in range(first, last))
        if progress is not None:
            progress(done, grid.total)


def _sweep_task(payload: Any, task: tuple[int, int]) -> Any:
    """One range of blocks, in a worker."""
    from .parallel import model_of
    from .sweep_run import run_blocks

    spec, plan = payload
    return run_blocks(model_of(spec), plan, *task)
