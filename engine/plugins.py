"""Plugins: extra folders of formulas, hardware nodes and presets. (Placeholder until the
plugin issue lands: only built-in data is loaded.)"""

from __future__ import annotations

from dataclasses import dataclass, field

from .resources import DataFolder


@dataclass
class PluginSet:
    extra: list[DataFolder] = field(default_factory=list)

    @classmethod
    def load(cls) -> PluginSet:
        return cls()

    def folders(self) -> list[DataFolder]:
        return list(self.extra)
