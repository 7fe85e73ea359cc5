"""The library's front door: `Engine` ties load -> graph -> evaluate together.

Everything the CLI does is one call here (docs/api.md has a walk-through):

    from dlformula import Engine
    eng = Engine()
    result = eng.evaluate("examples/gpt3-175b.yaml", {"parallelism.tp": 4, "parallelism.dp": 32})
    result["memory_per_gpu"]          # bytes

Overrides are typed values keyed by config key; a list of "KEY=VALUE" strings (the CLI's
`--set` text) is still accepted and parsed as the CLI parses it. The compiled model comes from
the on-disk cache when the formula files are unchanged, so this path imports neither sympy nor
networkx. An Engine remembers what it has read -- the config files, hardware nodes and presets
(each while its file is unchanged), the parsed units, and each config resolved without
overrides -- so evaluating many variations of one config costs little more than the generated
code itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any

from .cache import Key, file_stamp
from .config import (
    SPECIAL_KEYS,
    Config,
    Origin,
    check_constraints,
    convert_input,
    read_config_file,
    resolve,
)
from .errors import DlfError
from .model import (
    CompiledModel,
    compile_model,
    load_cached,
    load_stamped,
    remember_stamp,
    store_cached,
)
from .resources import Catalog, DataFolder, formula_sources
from .sources import Source, digest_sources
from .yamlfile import Located

Overrides = Mapping[str, Any] | Sequence[str]
_BASES_KEPT = 64  # resolved base configs an Engine remembers


class Result:
    """Values of every input, constant and quantity for one config."""

    def __init__(self, model: CompiledModel, config: Config, values: dict[str, Any]) -> None:
        self.model = model
        self.config = config
        self.values = values

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def __contains__(self, name: object) -> bool:
        return name in self.values

    def quantities(self) -> dict[str, Any]:
        return {n: self.values[n] for n in self.model.order}

    def __repr__(self) -> str:
        return f"<Result {self.config.path}: {len(self.model.order)} quantities>"


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
        self._config_files: dict[tuple[str, str], tuple[str, dict[str, Located]]] = {}
        self._bases: dict[tuple[str | None, str, str | None], tuple[tuple[str, ...],
                                                                    Config | None]] = {}

    # -- formula files and the compiled model -------------------------------------------------
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

    def stamp(self) -> str | None:
        """A key of the formula files by their stamps (inode, size, mtime) rather than their
        text, plus the plugins' config keys and functions: finds the cached model without
        reading a formula file. None when a folder is not on disk (a zip install)."""
        from .diskpath import real_folder

        parts: list[str] = []
        if self.plugins is not None:
            parts.append(self.plugins.cache_key())
            for s in self.plugins.sources():
                parts += [s.origin, s.path, s.text]
        for folder in self.folders:
            if folder.kind != "formulas":
                continue
            root = real_folder(folder.path)
            if root is None:
                return None
            try:
                names = sorted(n for n in os.listdir(root) if n.endswith(".yaml"))
            except OSError:
                return None
            parts.append(f"{folder.origin}\0{os.path.abspath(root)}")
            parts += [f"{n}:{file_stamp(os.path.join(root, n))}" for n in names]
        return Key("formula stamps", *parts).hex(64)

    @cached_property
    def catalog(self) -> Catalog:
        from .plugin_manager import MemoCatalog

        return MemoCatalog(self.folders, self.plugins)

    @cached_property
    def formula_set(self) -> Any:
        """The checked definitions with sympy expressions (imports sympy; for explain --latex,
        export and check)."""
        return self.load_formula_set(self.sources)

    def load_formula_set(self, sources: list[Source]) -> Any:
        """Check `sources` (e.g. this engine's plus files being linted) with the plugins'
        functions known; errors in a plugin's file name the plugin."""
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
        stamp = self.stamp() if self.use_cache else None
        model = load_stamped(stamp) if stamp is not None else None
        if model is None:
            digest = self.digest
            model = load_cached(digest) if self.use_cache else None
            if model is None:
                model = compile_model(self.formula_set)
                model.digest = digest
                if self.use_cache:
                    store_cached(model, stamp)
            elif stamp is not None:
                remember_stamp(stamp, digest)
        if self.plugins is not None:
            model.bind_functions(self.plugins.runtime_helpers())
        return model

    @cached_property
    def _plain_keys(self) -> dict[str, Any]:
        """Config key -> input definition, for keys an override can set directly."""
        return {d.config: d for d in self.model.inputs.values()
                if d.config and d.config not in SPECIAL_KEYS}

    # -- configs --------------------------------------------------------------------------------
    def config(self, path: str | None = None, overrides: Overrides = (),
               hf_config: str | None = None, check_layout: bool = True, *,
               sets: Overrides | None = None) -> Config:
        """Resolve a config file (or none) with `overrides` ({"parallelism.tp": 4, ...}; a
        list of "KEY=VALUE" strings is read as the CLI reads --set; `sets=` is the old name)
        into the number every input takes. `check_layout=False` skips the constraints."""
        ov = typed_overrides(overrides if sets is None else sets)
        flat = self._config_file(path) if path else {}
        base = self._base(path, hf_config, flat)
        if base is not None and all(k in self._plain_keys for k in ov):
            config = self._apply(base, ov)
            if config is not None:
                if check_layout:
                    check_constraints(self.model, config)
                return config
        # Anything the shortcut does not cover (a preset or node named in the overrides, a
        # refused value, a base config that does not resolve on its own) takes the full path,
        # which reports every problem at once.
        sets_located = {k: Located(v, 0) for k, v in ov.items()}
        return resolve(self.model, self.catalog, path, sets_located, check_layout, hf_config,
                       flat)

    def _config_file(self, path: str) -> dict[str, Located]:
        """The flattened config file, read again only when its stamp changes."""
        key = (path, os.path.abspath(path))
        stamp = file_stamp(key[1])
        hit = self._config_files.get(key)
        if hit is not None and hit[0] == stamp and stamp != "-":
            return hit[1]
        flat = read_config_file(path)
        self._config_files[key] = (stamp, flat)
        return flat

    def _base(self, path: str | None, hf_config: str | None,
              flat: dict[str, Located]) -> Config | None:
        """The config resolved without overrides and without its layout checked (None when it
        does not resolve on its own), remembered while every file it was read from is
        unchanged."""
        key = (path, os.path.abspath(path) if path else "", hf_config)
        hit = self._bases.get(key)
        if hit is not None and hit[0] == _stamps(hit[1], path, hf_config):
            return hit[1]
        try:
            base: Config | None = resolve(self.model, self.catalog, path, {}, False, hf_config,
                                          flat)
        except DlfError:
            base = None
        if len(self._bases) >= _BASES_KEPT:
            self._bases.clear()
        self._bases[key] = (_stamps(base, path, hf_config), base)
        return base

    def _apply(self, base: Config, overrides: dict[str, Any]) -> Config | None:
        """`base` with each override (a plain input key) set, as `resolve` would set it; None
        when a value is refused (the full path then reports it)."""
        if not overrides:
            return base
        values, labels = dict(base.values), dict(base.labels)
        origins, raw = dict(base.origins), dict(base.raw)
        for key, v in overrides.items():
            d = self._plain_keys[key]
            value, problem = convert_input(d, v)
            if problem:
                return None
            values[d.name] = d.code(value)
            labels[d.name] = value
            origins[d.name] = Origin("set")
            raw[key] = v
        return Config(base.path, values, labels, origins, base.node, base.preset, raw)

    # -- evaluation ----------------------------------------------------------------------------
    def evaluate(self, path: str | None = None, overrides: Overrides = (),
                 hf_config: str | None = None, *, sets: Overrides | None = None) -> Result:
        """Every input, constant and quantity for a config file with `overrides`."""
        config = self.config(path, overrides if sets is None else sets, hf_config)
        return Result(self.model, config, self.model.evaluate(config.values))

    def evaluate_many(self, path: str | None, variations: Iterable[Overrides],
                      hf_config: str | None = None, errors: str = "raise"
                      ) -> list[Result | DlfError]:
        """One Result per variation (overrides of the same config), in order. The config is
        resolved once; each variation costs its overrides, the layout checks and the generated
        code. `errors="keep"` puts a variation's error in its place instead of raising it."""
        if errors not in ("raise", "keep"):
            raise ValueError("errors must be 'raise' or 'keep'")
        out: list[Result | DlfError] = []
        for variation in variations:
            try:
                out.append(self.evaluate(path, variation, hf_config))
            except DlfError as exc:
                if errors == "raise":
                    raise
                out.append(exc)
        return out

    # -- the other stages, one call each ---------------------------------------------------------
    def explain(self, name: str, path: str | None = None, overrides: Overrides = (),
                hf_config: str | None = None, depth: int | None = None,
                latex: bool = False) -> str:
        """The derivation of `name` (with a config's numbers when `path` is given)."""
        from .explain import explain

        result = self.evaluate(path, overrides, hf_config) if path else None
        return explain(self, name, result, depth, latex)


def typed_overrides(overrides: Overrides | str | None) -> dict[str, Any]:
    """Overrides as {config key: value}: a mapping as given (NumPy scalars made plain), or a
    list of "KEY=VALUE" strings read as the CLI reads --set."""
    if not overrides:
        return {}
    if isinstance(overrides, Mapping):
        return {str(k): (v.item() if hasattr(v, "item") and not isinstance(v, str) else v)
                for k, v in overrides.items()}
    from .cli_args import parse_set

    return parse_set([overrides] if isinstance(overrides, str) else list(overrides))


def _stamps(config: Config | None, path: str | None, hf_config: str | None) -> tuple[str, ...]:
    """Stamps of every file a resolved config was read from."""
    files = [path, hf_config]
    if config is not None:
        files += [config.node.path if config.node else None,
                  config.preset.path if config.preset else None]
        hf = config.raw.get("model.hf_config")
        if hf and not hf_config:
            files.append(os.path.join(os.path.dirname(path), str(hf)) if path else str(hf))
    return tuple(file_stamp(f) if f else "" for f in files)
