"""Validation: predicting published training runs and comparing with what they measured.

- `runsfile`: reading a runs file (a YAML list of published runs) into rows with typed fields;
- `conventions`: how sources write accelerators, precisions, recompute modes and keys, and what
  frameworks do when a run is silent;
- `mapping`: one row -> config keys, with every default it picked;
- `report`: predicting each row, comparing, summarising, the table and JSON;
- `fit`: fitting the hardware families' figures and leave-one-source-out (fit.yaml);
- `bands`: error bands for eval and search from the validated runs (bands.json).
"""

from __future__ import annotations

from typing import Any

# Names are imported on first use (PEP 562), so `eval` can read the error bands
# (validation.bands) without loading the mapping.
_WHERE = {"Mapped": "mapping", "Skip": "mapping", "map_row": "mapping", "TARGETS": "report",
          "predict": "report", "summarize": "report", "to_json": "report", "to_table": "report",
          "validate": "report", "percentile": "stats", "Row": "runsfile",
          "load_runs": "runsfile"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'dlformula.validation' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
