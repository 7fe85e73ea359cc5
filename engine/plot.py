"""Charts: memory and step-time breakdowns, sweeps (line or heatmap), search scatter with the
Pareto front. matplotlib is an optional extra (`pip install 'dlformula[plot]'`) imported only
here, with the non-interactive Agg backend, so plots work on a server without a display.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from .errors import UsageError


def pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("plotting needs matplotlib, which is not installed; "
                         "pip install 'dlformula[plot]'") from None
    return plt


def scale_of(values: Any, unit: str, percent: bool = False) -> tuple[float, str]:
    """Divide an axis's values (in `unit`, as declared) by the first number to show them in the
    unit named second: the readable unit `eval` prints the largest of them in
    (humanize.readable_unit), or percent for a share (the quantity's `display: percent`)."""
    if percent:
        return 0.01, "%"
    from .humanize import readable_unit

    finite = np.abs(np.asarray(values, dtype=float).reshape(-1))
    finite = finite[np.isfinite(finite)]
    return readable_unit(float(finite.max()) if finite.size else 0.0, unit)


def breakdown(engine: Any, name: str) -> list[tuple[str, Any]]:
    """The parts `name` adds up, as the workbook's breakdown reads them from the formulas'
    structure (excel_printer.breakdown: sums split into terms, `x * (1 + f)` into x's parts and
    the overhead): (label as in `eval`, sympy expression of the part)."""
    from .excel_printer import breakdown as parts

    return [(label, expr) for label, expr, _ in parts(engine.formula_set, name)]


def _part_values(parts: list[tuple[str, Any]], columns: dict[str, Any], n: int,
                 factor: float) -> dict[str, Any]:
    """Each part's value for each of `n` configs, from the columns of the names it uses."""
    flat = {name: np.broadcast_to(np.asarray(v, dtype=float).reshape(-1), (n,))
            for name, v in columns.items()}  # a fixed value serves every config
    out = {}
    for label, expr in parts:
        values = [float(expr.subs({s: flat[s.name][i] for s in expr.free_symbols}))
                  for i in range(n)]
        out[label] = np.asarray(values) / factor
    return out


def _save(fig: Any, path: str) -> None:
    from .atomic import write_file

    fmt = path.rsplit(".", 1)[-1].lower() if "." in os.path.basename(path) else None
    try:
        write_file(path, lambda fh: fig.savefig(fh, dpi=120, bbox_inches="tight", format=fmt))
    except ValueError as exc:  # a format matplotlib does not know
        raise UsageError(f"cannot write '{path}': {exc}") from None
    finally:
        pyplot().close(fig)


def plot_breakdown(engine: Any, config: str, name: str, path: str,
                   sets: Iterable[str] = (), vary: str | None = None) -> None:
    """Stacked bars of `name`'s parts: one bar, or one per value of `vary` (KEY=VALUES)."""
    from .sweep import sweep

    plt = pyplot()
    model = engine.model
    parts = breakdown(engine, name)
    used = sorted({s.name for _, e in parts for s in e.free_symbols})
    unit = model.quantities[name].unit
    if vary:
        table = sweep(config, vary=[vary], sets=sets, engine=engine,
                      columns=[n for n in dict.fromkeys([*used, name])
                               if n in model.quantities or n in model.inputs])
        if not len(table):
            raise UsageError(f"--vary {vary}: no value gives a layout that can run")
        ticks = [str(v) for v in table.values(table.axes[0])]
        xlabel = vary.split("=", 1)[0]
        columns = {n: table[n] if n in table else table.config.values[n] for n in used}
        data = _part_values(parts, columns, len(ticks), 1.0)
        capacity = table.config.values.get("hbm_capacity")
    else:
        result = engine.evaluate(config, sets)
        ticks, xlabel = [""], ""
        data = _part_values(parts, {n: result[n] for n in used}, 1, 1.0)
        capacity = result.values.get("hbm_capacity")
    line = capacity if name == "memory_per_gpu" and capacity else 0.0
    factor, unit_text = scale_of([*sum(data.values(), np.zeros(len(ticks))), line], unit)
    data = {part: values / factor for part, values in data.items()}
    fig, ax = plt.subplots(figsize=(max(6, 1 + 0.9 * len(ticks)), 4.5))
    bottom = np.zeros(len(ticks))
    for part, values in data.items():
        if np.allclose(values, 0):
            continue
        ax.bar(ticks, values, bottom=bottom, label=part)
        bottom += values
    if line:
        ax.axhline(capacity / factor, color="black", linestyle="--", linewidth=1,
                   label=f"HBM {capacity / factor:.0f} {unit_text}")
    ax.set_ylabel(f"{name} ({unit_text})" if unit_text else name)
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_title(f"{name}: breakdown" + (f" ({os.path.basename(config)})" if config else ""))
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    _save(fig, path)


def default_y(table: Any) -> str | None:
    """What a sweep plot shows unless told: the sweep's first result column (not a varied key,
    the dp a sweep filled in, or the fits-memory mark)."""
    return next((c for c in table.names if c not in table.axes and c not in table.filled
                 and c != "fits_memory"), None)


def plot_sweep(table: Any, path: str, y: str | None = None) -> None:
    """One varied key: a line (bars for words); two: a heatmap; blank where no row is left."""
    plt = pyplot()
    axes = list(table.axes)
    y = y or default_y(table)
    if y is None or y not in table:
        raise UsageError(f"nothing to plot: '{y}' is not a column of the sweep")
    if not axes or len(axes) > 2:
        raise UsageError("a sweep plot takes one --vary axis (line) or two (heatmap); fix the "
                         "others with --set")
    raw = np.asarray(table[y], dtype=float)
    factor, unit_text = scale_of(raw, table.units.get(y, "1"), y in table.percent)
    values = raw / factor
    ylabel = f"{y} ({unit_text})" if unit_text else y
    if len(axes) == 1:
        x = axes[0]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        fits = _fits(table)
        if x in table.decoders:
            bars = ax.bar([str(v) for v in table.values(x)], values)
            for bar, ok in zip(bars, fits, strict=True):
                if not ok:
                    bar.set_hatch("//")
                    bar.set_alpha(0.5)
        else:
            order = np.argsort(np.asarray(table[x]), kind="stable")
            xs, ys = np.asarray(table[x])[order], values[order]
            ax.plot(xs, ys, marker="o")
            if not fits.all():
                bad = ~fits[order]
                ax.scatter(xs[bad], ys[bad], s=80, facecolors="none", edgecolors="crimson",
                           zorder=3)
        if not fits.all():
            ax.plot([], [], "o", mfc="none", mec="crimson", label="does not fit in memory")
            ax.legend(fontsize="small")
        ax.set_xlabel(x)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    else:
        rows_key, cols_key = axes
        row_vals, row_idx = _levels(table, rows_key)
        col_vals, col_idx = _levels(table, cols_key)
        grid = np.full((len(row_vals), len(col_vals)), np.nan)
        grid[row_idx, col_idx] = values
        fig, ax = plt.subplots(figsize=(max(5, 1.2 + 0.8 * len(col_vals)),
                                        max(4, 1 + 0.5 * len(row_vals))))
        image = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", cmap="viridis",
                          origin="lower")
        ax.set_xticks(range(len(col_vals)), [str(v) for v in col_vals])
        ax.set_yticks(range(len(row_vals)), [str(v) for v in row_vals])
        ax.set_xlabel(cols_key)
        ax.set_ylabel(rows_key)
        no_fit = np.zeros_like(grid, dtype=bool)
        no_fit[row_idx, col_idx] = ~_fits(table)
        if grid.size <= 200:
            for (i, j), v in np.ndenumerate(grid):
                if np.isfinite(v):
                    ax.text(j, i, f"{v:.3g}" + ("\n(no fit)" if no_fit[i, j] else ""),
                            ha="center", va="center", fontsize=7, color="white")
        rows_bad, cols_bad = np.nonzero(no_fit)
        if len(rows_bad) and grid.size > 200:  # (small grids say it in each cell)
            ax.scatter(cols_bad, rows_bad, marker="x", s=20, color="crimson",
                       label="does not fit in memory")
            ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.25, 1))
        fig.colorbar(image, ax=ax, label=ylabel)
    ax.set_title(f"{y} over {' x '.join(axes)}")
    _save(fig, path)


def _fits(table: Any) -> np.ndarray:
    """Which rows fit in memory (every row when the sweep did not mark them)."""
    if "fits_memory" in table:
        return np.asarray(table["fits_memory"], dtype=float) > 0
    return np.ones(len(table), dtype=bool)


def _levels(table: Any, name: str) -> tuple[list[Any], np.ndarray]:
    raw = np.asarray(table[name], dtype=float)
    levels, index = np.unique(raw, return_inverse=True)
    decoder = table.decoders.get(name)
    shown = [decoder.get(int(v), v) if decoder else (int(v) if v == int(v) else v)
             for v in levels.tolist()]
    return shown, index


def plot_search(result: Any, path: str, x: str = "memory_per_gpu") -> None:
    """Every layout that fits: objective against `x`, the Pareto front and the best marked."""
    from .search import pareto_front

    plt = pyplot()
    if not len(result):
        raise UsageError("no layout fits, so there is nothing to plot")
    y = result.objective
    if x not in result:
        raise UsageError(f"-x {x}: not a column of the search; add it with columns=[...]")
    fx, tx = scale_of(result[x], result.units.get(x, "1"), x in result.percent)
    fy, ty = scale_of(result[y], result.units.get(y, "1"), y in result.percent)
    xs = np.asarray(result[x], dtype=float) / fx
    ys = np.asarray(result[y], dtype=float) / fy
    fig, ax = plt.subplots(figsize=(7.5, 5))
    colour = np.log2(np.asarray(result["tp"], dtype=float)) if "tp" in result else None
    points = ax.scatter(xs, ys, s=10, c=colour, cmap="viridis", alpha=0.6, label="layouts")
    if colour is not None:
        levels = np.unique(colour)
        bar = fig.colorbar(points, ax=ax, ticks=levels)
        bar.ax.set_yticklabels([str(int(2**v)) for v in levels])
        bar.set_label("tp")
    q = result.model.quantities.get(x) if result.model is not None else None
    higher = q is not None and q.better == "higher"  # the quantity's `better:` says which way
    front = pareto_front(result, [(x, higher), (y, result.descending)])
    order = front[np.argsort(xs[front], kind="stable")]
    ax.step(xs[order], ys[order], where="post", color="crimson", linewidth=1.5,
            label="Pareto front")
    ax.scatter(xs[order], ys[order], s=30, color="crimson", zorder=3)
    ax.scatter(xs[:1], ys[:1], s=160, marker="*", color="gold", edgecolor="black", zorder=4,
               label="recommended")
    capacity = result.config.values.get("hbm_capacity") if result.config else None
    if x == "memory_per_gpu" and capacity:
        ax.axvline(capacity / fx, color="black", linestyle="--", linewidth=1, label="HBM")
    ax.set_xlabel(f"{x} ({tx})" if tx else x)
    ax.set_ylabel(f"{y} ({ty})" if ty else y)
    finite = ys[np.isfinite(ys) & (ys > 0)]
    if len(finite) and finite.max() > 20 * finite.min():
        ax.set_yscale("log")  # a few slow layouts would flatten the interesting ones
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    ax.set_title(f"{len(result):,} layouts that fit, by {y}")
    _save(fig, path)
