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
from .resources import Catalog, DataFolder, formula_sources
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
        """`plugins`: a loaded `PluginSet`, or a list of local plugin folders to load besides the
        core, built-in and installed plugins (default: the process's plugin set, see
        plugin_manager.default). With explicit `folders`, only those are read (and `plugins`,
        if given, adds its functions and config keys)."""
        if isinstance(plugins, (list, tuple)):
            from .plugin_manager import PluginSet

            plugins = PluginSet.load(tuple(str(p) for p in plugins))
        if folders is None:
            if plugins is None:
                from .plugin_manager import default

                plugins = default()
            folders = plugins.folders()
        self.plugins = plugins
        self.folders = folders
        self.use_cache = use_cache

    @cached_property
    def sources(self) -> list[Source]:
        extra = self.plugins.sources() if self.plugins is not None else []
        return formula_sources(self.folders) + extra

    @cached_property
    def digest(self) -> str:
        """The cache key: every formula file, plus the plugin functions the code calls."""
        digest = digest_sources(self.sources)
        key = self.plugins.cache_key() if self.plugins is not None else ""
        if not key:
            return digest
        import hashlib

        return hashlib.sha256(f"{digest}|{key}".encode()).hexdigest()

    @cached_property
    def catalog(self) -> Catalog:
        if self.plugins is not None:
            return self.plugins.catalog(self.folders)  # errors name the plugin
        return Catalog(self.folders)

    @cached_property
    def formula_set(self) -> Any:
        """The checked definitions with sympy expressions (imports sympy; for explain/export)."""
        return self.load_formula_set(self.sources)

    def load_formula_set(self, sources: list[Source]) -> Any:
        """Check `sources` (e.g. this engine's plus files being linted) with the plugins'
        functions known; errors in a plugin's file name the plugin."""
        from .errors import DlfError
        from .loader import load_formula_set

        if self.plugins is None:
            return load_formula_set(sources)
        self.plugins.register_functions()
        try:
            return load_formula_set(sources)
        except DlfError as exc:
            raise self.plugins.annotate(exc) from None

    @cached_property
    def model(self) -> CompiledModel:
        model = load_cached(self.digest) if self.use_cache else None
        if model is None:
            model = compile_model(self.formula_set)
            model.digest = self.digest
            if self.use_cache:
                store_cached(model)
        if self.plugins is not None:
            model.bind_functions(self.plugins.runtime_helpers())
        return model

    def config(self, path: str | None, sets: list[str] | tuple[str, ...] = (),
               hf_config: str | None = None, check_layout: bool = True) -> Config:
        return resolve(self.model, self.catalog, path, parse_set(sets), check_layout, hf_config)

    def evaluate(self, path: str | None, sets: list[str] | tuple[str, ...] = (),
                 hf_config: str | None = None) -> Result:
        config = self.config(path, sets, hf_config)
        return Result(self.model, config, self.model.evaluate(config.values))
