"""dlformula: a spreadsheet of named, documented formulas for planning distributed training.

The public API is `Engine` (load formula files, resolve a config, evaluate); see core.py.
Imports here stay lazy so the cached `dlformula eval` path does not pay for sympy or networkx.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["Engine", "Result", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("Engine", "Result"):
        from . import core

        return getattr(core, name)
    raise AttributeError(name)
