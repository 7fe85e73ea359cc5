"""Validation: predicting published training runs and comparing with what they measured.

- `runsfile`: reading a runs file (a YAML list of published runs) into rows with typed fields;
- `conventions`: how sources write accelerators, precisions, recompute modes and keys, and what
  frameworks do when a run is silent;
- `mapping`: one row -> config keys, with every default it picked;
- `report`: predicting each row, comparing, summarising, the table and JSON.
"""

from __future__ import annotations

from .mapping import Mapped, Skip, map_row
from .report import TARGETS, percentile, predict, summarize, to_json, to_table, validate
from .runsfile import Row, load_runs

__all__ = ["TARGETS", "Mapped", "Row", "Skip", "load_runs", "map_row", "percentile", "predict",
           "summarize", "to_json", "to_table", "validate"]
