"""The library's front door: `Engine` ties load -> graph -> evaluate together.

Everything the CLI does is one call here:

    from dlformula import Engine
    eng = Engine()
    result = eng.evaluate("examples/gpt3-175b.yaml", sets=["parallelism.tp=4"])
    result["memory_per_gpu"]          # bytes

The compiled model comes from the on-disk cache when the formula files are unchanged, so this
path imports neither sympy nor networkx.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from .config import Config, parse_set, resolve
from .model import CompiledModel, compile_model, load_cached, store_cached
from .resources import Catalog, DataFolder, builtin_folders, formula_sources
from .sources import Source, digest_sources


class Result:
    """Values of every input, constant and quantity for one config."""

    def __init__(self, model: CompiledModel, config: Config, values: dict[str, Any]) -> None:
        self.model = model
        self.config = config
        self.values = values

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def quantities(self) -> dict[str, Any]:
        return {n: self.values[n] for n in self.model.order}


class Engine:
    """Formula files, hardware nodes and presets from the core and any plugins."""

    def __init__(self, folders: list[DataFolder] | None = None, use_cache: bool = True,
                 plugins: Any = None) -> None:
        if folders is None:
            from .plugin_manager import PluginSet

            self.plugins = plugins if plugins is not None else PluginSet.load()
            folders = builtin_folders() + self.plugins.folders()
        else:
            self.plugins = plugins
        self.folders = folders
        self.use_cache = use_cache

    @cached_property
    def sources(self) -> list[Source]:
        return formula_sources(self.folders)

    @cached_property
    def digest(self) -> str:
        return digest_sources(self.sources)

    @cached_property
    def catalog(self) -> Catalog:
        return Catalog(self.folders)

    @cached_property
    def formula_set(self) -> Any:
        """The checked definitions with sympy expressions (imports sympy; for explain/export)."""
        from .loader import load_formula_set

        return load_formula_set(self.sources)

    @cached_property
    def model(self) -> CompiledModel:
        if self.use_cache:
            cached = load_cached(self.digest)
            if cached is not None:
                return cached
        model = compile_model(self.formula_set)
        if self.use_cache:
            store_cached(model)
        return model

    def config(self, path: str | None, sets: list[str] | tuple[str, ...] = (),
               hf_config: str | None = None, check_layout: bool = True) -> Config:
        return resolve(self.model, self.catalog, path, parse_set(sets), check_layout, hf_config)

    def evaluate(self, path: str | None, sets: list[str] | tuple[str, ...] = (),
                 hf_config: str | None = None) -> Result:
        config = self.config(path, sets, hf_config)
        return Result(self.model, config, self.model.evaluate(config.values))
