"""Plugins: extra folders of formulas, hardware nodes and presets. (Placeholder until the
plugin issue lands: only built-in data is loaded.)"""

from __future__ import annotations

from .resources import DataFolder


class PluginSet:
    def __init__(self, extra: list[DataFolder] | None = None) -> None:
        self.extra = list(extra or [])

    @classmethod
    def load(cls) -> PluginSet:
        return cls()

    def folders(self) -> list[DataFolder]:
        return list(self.extra)
