"""Tables of results and the writers that stream them to CSV, JSON and Excel.

`Table` holds one NumPy column per name, one row per config; categorical columns hold codes and
decode to their labels. `open_writer` writes rows in chunks, so a sweep can stream any number
of them to a file without keeping them. Sweeps and searches both return and write tables.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import numpy as np

from .errors import UsageError

T = TypeVar("T", bound="Table")
WRITE_BLOCK = 65536  # rows turned into text (or cells) at a time


def percent_names(model: Any) -> frozenset[str]:
    """The quantities a model shows as percentages (`display: percent` in their YAML)."""
    return frozenset(n for n, q in model.quantities.items() if q.display == "percent")


# -- tables -------------------------------------------------------------------------------------
class Table:
    """Columns of numbers, one row per config. Categorical columns hold codes and decode to their
    labels (`rows()`, `to_csv()`, ...); `table[name]` gives the raw NumPy column."""

    def __init__(self, columns: Mapping[str, Any], decoders: Mapping[str, dict] | None = None,
                 units: Mapping[str, str] | None = None, stats: Any = None,
                 percent: Iterable[str] = ()) -> None:
        self.columns = {k: np.asarray(v) for k, v in columns.items()}
        self.decoders = {k: v for k, v in (decoders or {}).items() if k in self.columns}
        self.units = {k: v for k, v in (units or {}).items() if k in self.columns}
        self.percent = frozenset(percent)  # shares shown as 53.1 % (the quantity's `display`)
        self.stats = stats
        self.config: Any = None  # the resolved base config, when there is one
        self.axes: list[str] = []  # the columns that were varied
        self.filled: list[str] = []  # columns a sweep set from the axes (dp filling the GPUs)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __contains__(self, name: object) -> bool:
        return name in self.columns

    @property
    def names(self) -> list[str]:
        return list(self.columns)

    def _derived(self: T, columns: dict[str, np.ndarray]) -> T:
        t = object.__new__(type(self))
        t.__dict__.update(self.__dict__)
        t.columns = columns
        return t

    def take(self: T, index: Any) -> T:
        """The rows at `index` (an integer array or boolean mask), same columns."""
        return self._derived({k: v[index] for k, v in self.columns.items()})

    def head(self: T, n: int) -> T:
        return self.take(slice(0, max(n, 0)))

    def sort(self: T, by: str, descending: bool = False) -> T:
        """Rows ordered by column `by` (NaN last); ties keep their order."""
        return self.take(sort_order(self.columns[by], descending))

    def values(self, name: str) -> list[Any]:
        """A column as plain Python values, categorical codes turned into labels."""
        return _plain_column(self.columns[name], self.decoders.get(name))

    def rows(self) -> list[dict[str, Any]]:
        cols = {k: self.values(k) for k in self.columns}
        return [dict(zip(cols, r, strict=False)) for r in zip(*cols.values(), strict=False)]

    def to_pandas(self) -> Any:
        import pandas as pd  # optional: only when asked for

        return pd.DataFrame({k: self.values(k) if k in self.decoders else v
                             for k, v in self.columns.items()})

    def write(self, target: Any, fmt: str | None = None) -> None:
        """Write every row to a path (format from its suffix) or a text stream (`fmt`)."""
        writer = open_writer(target, self.names, self.decoders, self.units, fmt)
        try:
            if isinstance(writer, _XlsxWriter):
                writer.reserve(len(self))  # refuse before a million rows go into openpyxl
            # in blocks: the cell texts of two million rows at once took 4 GB
            for start in range(0, max(len(self), 1), WRITE_BLOCK):
                writer.write({k: v[start:start + WRITE_BLOCK] for k, v in self.columns.items()})
        except BaseException:
            writer.abort()
            raise
        writer.close()

    def to_csv(self) -> str:
        import io

        buf = io.StringIO()
        self.write(buf, "csv")
        return buf.getvalue()

    def to_json(self) -> str:
        import io

        buf = io.StringIO()
        self.write(buf, "json")
        return buf.getvalue()

    def format(self, limit: int | None = 20, headers: Mapping[str, str] | None = None) -> str:
        """A table for people: labels for choices, human units (GiB, ms, %) for quantities."""
        shown = self if limit is None else self.head(limit)
        headers = headers or {}
        cols = []
        for name in self.names:
            cells = [headers.get(name, name)] + human_column(shown, name)
            width = max(len(c) for c in cells)
            numeric = name not in self.decoders
            cols.append([c.rjust(width) if numeric and i else c.ljust(width)
                         for i, c in enumerate(cells)])
        lines = ["  ".join(row).rstrip() for row in zip(*cols, strict=False)] if cols else []
        if limit is not None and len(self) > limit:
            lines.append(f"... {len(self) - limit:,} more rows")
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        return self.format(limit=10)


def concat_columns(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Column blocks with the same names joined row-wise (the block itself when there is one)."""
    if not parts:
        return {}
    if len(parts) == 1:
        return parts[0]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def sort_order(col: np.ndarray, descending: bool) -> np.ndarray:
    key = np.asarray(col, dtype=np.float64)
    key = -key if descending else key
    return np.argsort(np.where(np.isnan(key), np.inf, key), kind="stable")


def _plain_column(col: np.ndarray, decoder: dict | None) -> list[Any]:
    if decoder is not None:
        return [decoder.get(int(v), v) if v == v else None for v in col.tolist()]
    out = []
    for v in col.tolist():
        if isinstance(v, float):
            if not math.isfinite(v):
                v = None
            elif v.is_integer() and abs(v) < 2**53:
                v = int(v)
        out.append(v)
    return out


def human_column(table: Table, name: str) -> list[str]:
    col = table.columns[name]
    decoder = table.decoders.get(name)
    if decoder is not None:
        return [str(label_text(decoder.get(int(v), v))) for v in col.tolist()]
    unit = table.units.get(name, "1")
    if name in table.percent:
        return [f"{v * 100:.1f} %" if math.isfinite(v) else str(v) for v in col.tolist()]
    if unit not in ("1", "") and unit not in _COUNT_UNITS:
        from .humanize import human

        return [" ".join(p for p in human(v, unit) if p) for v in col.tolist()]
    return [number_text(v) for v in col.tolist()]


_COUNT_UNITS = {"GPU", "token", "sequence", "layer", "head", "microbatch", "expert", "stage"}


def label_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def number_text(v: float) -> str:
    if not math.isfinite(v):
        return str(v)
    if float(v).is_integer() and abs(v) < 1e15:
        return f"{int(v):,}" if abs(v) >= 1e5 else str(int(v))
    return f"{v:.4g}"


# -- writers ------------------------------------------------------------------------------------
XLSX_MAX_ROWS = 1_048_575


def open_writer(target: Any, names: list[str], decoders: Mapping[str, dict],
                units: Mapping[str, str], fmt: str | None = None) -> Any:
    """A writer for rows in chunks: `.write(columns)`, `.close()`."""
    if isinstance(target, str):
        suffix = target.rsplit(".", 1)[-1].lower() if "." in target else ""
        fmt = fmt or suffix
        if fmt not in ("csv", "json", "xlsx"):
            raise UsageError(f"cannot tell the format of '{target}'; name the file .csv, .json "
                             "or .xlsx")
        if fmt == "xlsx":
            return _XlsxWriter(target, names, decoders, units)
        from .atomic import AtomicFile  # whole or not at all: a temporary file, then rename

        return _TextWriter(AtomicFile(target), fmt, names, decoders, close_stream=True)
    return _TextWriter(target, fmt or "csv", names, decoders, close_stream=False)


def _text_cells(col: np.ndarray, decoder: dict | None, fmt: str) -> list[str]:
    """Cell texts of one column: repr of floats (round-trips), integers without '.0'."""
    if decoder is not None:
        labels = {k: (json_str(label_text(v)) if fmt == "json" and not isinstance(v, bool)
                      else label_text(v)) for k, v in decoder.items()}
        return [labels.get(int(v), "") for v in col.tolist()]
    a = np.asarray(col, dtype=np.float64)
    finite = np.isfinite(a)
    if finite.all() and (a == np.round(a)).all() and (np.abs(a) < 2**53).all():
        return list(map(str, a.astype(np.int64).tolist()))
    out = list(map(repr, a.tolist()))
    if not finite.all():
        bad = "null" if fmt == "json" else ""
        for i in np.flatnonzero(~finite).tolist():
            out[i] = bad
    return out


def json_str(s: str) -> str:
    import json

    return json.dumps(s)


class _TextWriter:
    def __init__(self, stream: Any, fmt: str, names: list[str], decoders: Mapping[str, dict],
                 close_stream: bool) -> None:
        self.stream, self.fmt, self.names, self.decoders = stream, fmt, names, decoders
        self.close_stream = close_stream
        self.rows = 0
        if fmt == "csv":
            stream.write(",".join(names) + "\n")
            self.template = ",".join(["%s"] * len(names)) + "\n"
        else:
            stream.write("[")
            keys = [json_str(n) for n in names]
            self.template = "{" + ", ".join(f"{k}: %s" for k in keys) + "}"

    def write(self, columns: Mapping[str, np.ndarray]) -> None:
        cells = [_text_cells(columns[n], self.decoders.get(n), self.fmt) for n in self.names]
        if not cells or not cells[0]:
            return
        t = self.template
        if self.fmt == "csv":
            self.stream.write("".join(t % r for r in zip(*cells, strict=False)))
        else:
            sep = "\n" if self.rows == 0 else ",\n"
            self.stream.write(sep + ",\n".join(t % r for r in zip(*cells, strict=False)))
        self.rows += len(cells[0])

    def close(self) -> None:
        if self.fmt == "json":
            self.stream.write("\n]\n" if self.rows else "]\n")
        if self.close_stream:
            self.stream.close()

    def abort(self) -> None:
        """Stop after a failure: a file being written is removed (an existing one kept)."""
        if self.close_stream and hasattr(self.stream, "abort"):
            self.stream.abort()


class _XlsxWriter:
    def __init__(self, path: str, names: list[str], decoders: Mapping[str, dict],
                 units: Mapping[str, str]) -> None:
        from openpyxl import Workbook

        self.path, self.names, self.decoders = path, names, decoders
        self.book = Workbook(write_only=True)
        self.sheet = self.book.create_sheet("sweep")
        self.sheet.append([f"{n} ({units[n]})" if units.get(n, "1") not in ("1", "") else n
                           for n in names])
        self.rows = 0

    def reserve(self, n: int) -> None:
        """Refuse now if `n` more rows will not fit in a sheet."""
        if self.rows + n > XLSX_MAX_ROWS:
            raise UsageError(f"more than {XLSX_MAX_ROWS:,} rows do not fit in an Excel sheet; "
                             "write .csv or .json, or narrow the sweep with --where")

    def write(self, columns: Mapping[str, np.ndarray]) -> None:
        n = len(columns[self.names[0]]) if self.names else 0
        if self.rows + n > XLSX_MAX_ROWS:
            raise UsageError(f"more than {XLSX_MAX_ROWS:,} rows do not fit in an Excel sheet; "
                             "write .csv or .json, or narrow the sweep with --where")
        cols = [_plain_column(columns[k], self.decoders.get(k)) for k in self.names]
        for row in zip(*cols, strict=False):
            self.sheet.append(list(row))
        self.rows += n

    def close(self) -> None:
        from .atomic import forget_frames, write_file

        try:
            write_file(self.path, self.book.save)
        except BaseException as exc:
            self._discard()
            forget_frames(exc)
            raise

    def _discard(self) -> None:
        """Close the sheet's row generator and remove openpyxl's own temporary file now,
        quietly (left to the garbage collector they print 'Exception ignored in ...')."""
        from .atomic import quiet_unraisable

        sheet, self.book, self.sheet = self.sheet, None, None
        with quiet_unraisable():
            for step in ("_rows", "_writer"):
                part = getattr(sheet, step, None)
                try:
                    if step == "_rows" and part is not None:
                        part.close()
                    elif part is not None:
                        part.cleanup()
                except Exception:
                    pass

    def abort(self) -> None:
        """Nothing of the target is on disk before close(): drop the sheet's temporary file."""
        self._discard()
