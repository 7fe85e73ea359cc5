"""`dlformula.validate`: the validation stage's public functions (they live in
`dlformula.validation`; this module keeps `from dlformula.validate import validate` working)."""

from __future__ import annotations

from .validation import (
    TARGETS,
    Mapped,
    Row,
    Skip,
    load_runs,
    map_row,
    percentile,
    predict,
    summarize,
    to_json,
    to_table,
    validate,
)

__all__ = ["TARGETS", "Mapped", "Row", "Skip", "load_runs", "map_row", "percentile", "predict",
           "summarize", "to_json", "to_table", "validate"]
