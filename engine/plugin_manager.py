"""Plugins: pluggy hooks that contribute formulas, hardware nodes, presets, config keys,
functions and commands. The core and the built-in plugins register through the same hooks.

Load order (it matters for `override: true`: a later file replaces an earlier definition):

1. the core (`dlformula`: formulas/, hardware/, presets/);
2. built-in plugins (`dlformula.plugins.moe`);
3. installed plugins: entry points in group `dlformula`, by name. `DLFORMULA_LOAD_PLUGINS`
   limits them: unset loads all, "" loads none, "a,b" only those (tests set it, so an
   installed plugin never changes their numbers). Which entry points exist is remembered in
   the cache folder until a distribution is installed, upgraded or removed
   (entry_points.py);
4. local plugin folders from `DLFORMULA_PLUGINS` (separated by the OS path separator);
5. local plugin folders given with `--plugin PATH`.

A local folder holds `formulas/`, `hardware/` and `presets/` subfolders (each optional) and,
optionally, Python hooks: an `__init__.py` (the folder is imported as a package) or else every
top-level `*.py` file. Problems -- an import error, a misspelled hook, a missing folder, a hook
that raises or returns the wrong thing -- become one `ModelError` line each, naming the plugin.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

from .diskpath import DiskPath, package_folder
from .entry_points import GROUP, installed_entry_points, load_entry_point
from .errors import DlfError, ModelError, did_you_mean, display_path, raise_all
from .resources import Catalog, DataFolder
from .sources import Source

CORE = "dlformula"
BUILTIN_PLUGINS = {"moe": "dlformula.plugins.moe"}
FOLDER_HOOKS = {"formula_folders": "formulas", "hardware_folders": "hardware",
                "preset_folders": "presets"}
ENV_PATHS = "DLFORMULA_PLUGINS"
ENV_LOAD = "DLFORMULA_LOAD_PLUGINS"
FUNCTION_DIMS = ("dimensionless", "same", "first", "sqrt")


class PluginInfo(NamedTuple):
    """One loaded plugin: who it is, where it came from, which pluggy objects make it up."""

    name: str
    version: str
    kind: str  # core | built-in | entry point | folder
    origin: str  # module name, "dist 1.0 (entry point x = module)", or a folder path
    objects: tuple[Any, ...]  # registered with pluggy, in order


class _Core:
    """The core's own hook implementations: its data folders. (Its functions are a module of
    their own, core_functions.py, registered beside this.)"""

    def __init__(self) -> None:
        from . import hookspecs

        impl = hookspecs.hookimpl

        def _folder(kind: str) -> Any:
            return lambda: [package_folder(f"dlformula.{kind}")]

        self.formula_folders = impl(specname="formula_folders")(_folder("formulas"))
        self.hardware_folders = impl(specname="hardware_folders")(_folder("hardware"))
        self.preset_folders = impl(specname="preset_folders")(_folder("presets"))


class _LocalFolder:
    """The data subfolders of a local plugin folder, offered through the same hooks."""

    def __init__(self, root: str) -> None:
        from . import hookspecs

        for hook, sub in FOLDER_HOOKS.items():
            path = DiskPath(os.path.join(root, sub))
            if path.is_dir():
                setattr(self, hook, hookspecs.hookimpl(specname=hook)(
                    lambda path=path: [path]))


class PluginSet:
    """The loaded plugins and everything they contribute (computed once, on demand)."""

    def __init__(self, pm: Any, infos: list[PluginInfo]) -> None:
        self.pm = pm
        self.infos = infos
        self._folders: list[DataFolder] | None = None
        self._sources: list[Source] | None = None
        self._functions: list[tuple[str, Any]] | None = None

    # -- loading --------------------------------------------------------------------------------
    @classmethod
    def load(cls, paths: list[str] | tuple[str, ...] = (), entry_points: bool = True,
             env: Mapping[str, str] | None = None) -> PluginSet:
        """Core, built-in plugins, installed plugins and local folders (`paths` last)."""
        import pluggy

        from . import __version__, hookspecs

        env = os.environ if env is None else env  # (tests pass their own)
        pm = pluggy.PluginManager(GROUP)
        pm.add_hookspecs(hookspecs)
        infos: list[PluginInfo] = []
        errors: list[DlfError] = []

        def add(name: str, version: str, kind: str, origin: str, objects: list[Any]) -> None:
            for prev in infos:
                if prev.name == name:
                    errors.append(ModelError(
                        f"two plugins are named '{name}': {prev.kind} {prev.origin} and {kind} "
                        f"{origin}; uninstall or rename one"))
                    return
            registered = []
            for i, obj in enumerate(objects):
                try:
                    pm.register(obj, name=name if i == 0 else f"{name}:{i}")
                except pluggy.PluginValidationError as exc:
                    # pluggy's text is several lines starting "Plugin 'x' for hook 'h'".
                    detail = "; ".join(str(exc).splitlines()[1:]) or str(exc)
                    errors.append(ModelError(f"plugin '{name}' ({origin}): {detail}; see "
                                             "docs/plugins.md for each hook's signature"))
                    continue
                except ValueError as exc:  # the same module registered twice
                    errors.append(ModelError(f"plugin '{name}' ({origin}): {exc}"))
                    continue
                registered.append(obj)
            infos.append(PluginInfo(name, version, kind, origin, tuple(registered)))

        from . import core_functions

        add(CORE, __version__, "core", "dlformula", [_Core(), core_functions])
        for name, module in BUILTIN_PLUGINS.items():
            try:
                mod = importlib.import_module(module)
            except Exception as exc:  # a broken installation, reported like any plugin
                errors.append(ModelError(f"built-in plugin '{name}' ({module}) cannot be "
                                         f"imported: {type(exc).__name__}: {exc}"))
                continue
            add(name, __version__, "built-in", module, [mod])
        if entry_points:
            _load_entry_points(env, add, errors)
        local = [p for p in env.get(ENV_PATHS, "").split(os.pathsep) if p.strip()]
        for where, items in ((ENV_PATHS, local), ("--plugin", list(paths))):
            for p in items:
                _load_folder(p, where, add, errors)
        errors += _unknown_hooks(pm, infos)
        raise_all(errors)
        pm.check_pending()  # everything it would reject was reported above
        return cls(pm, infos)

    # -- contributions --------------------------------------------------------------------------
    def _call(self, info: PluginInfo, hook: str, *args: Any) -> list[Any]:
        """The results of `hook` from one plugin's objects (errors name the plugin)."""
        out = []
        caller = getattr(self.pm.hook, hook)
        for impl in caller.get_hookimpls():
            if impl.plugin not in info.objects:
                continue
            try:
                result = impl.function(*args)
            except DlfError:
                raise
            except Exception as exc:
                raise ModelError(f"plugin '{info.name}': hook {hook}() failed: "
                                 f"{type(exc).__name__}: {exc}") from None
            out.append(result)
        return out

    def _list(self, info: PluginInfo, hook: str) -> list[Any]:
        items: list[Any] = []
        for result in self._call(info, hook):
            if result is None:
                continue
            if isinstance(result, (str, bytes, dict)) or not hasattr(result, "__iter__"):
                raise ModelError(f"plugin '{info.name}': hook {hook}() must return a list, "
                                 f"not {type(result).__name__}")
            items += list(result)
        return items

    def folders(self) -> list[DataFolder]:
        """Every data folder, in load order (core first); a folder given twice counts once."""
        if self._folders is None:
            out: list[DataFolder] = []
            seen: set[tuple[str, str]] = set()
            errors: list[DlfError] = []
            for info in self.infos:
                for hook, kind in FOLDER_HOOKS.items():
                    for item in self._list(info, hook):
                        folder = _as_folder(item)
                        if folder is None:
                            errors.append(ModelError(
                                f"plugin '{info.name}': hook {hook}() returned {item!r}, not a "
                                "folder path"))
                            continue
                        if not folder.is_dir():
                            errors.append(ModelError(
                                f"plugin '{info.name}': {kind} folder {display_path(folder)} "
                                f"(from {hook}()) does not exist; create it or stop returning "
                                "it"))
                            continue
                        key = (kind, os.path.abspath(str(folder)))
                        if key not in seen:
                            seen.add(key)
                            out.append(DataFolder(kind, folder, info.name))
            raise_all(errors)
            self._folders = out
        return self._folders

    def sources(self) -> list[Source]:
        """Formula sources made from the plugins' `config_keys()` (one per config section)."""
        if self._sources is None:
            out = []
            errors: list[DlfError] = []
            for info in self.infos:
                keys: dict[str, Any] = {}
                for result in self._call(info, "config_keys"):
                    if result is None:
                        continue
                    if not isinstance(result, dict):
                        errors.append(ModelError(
                            f"plugin '{info.name}': hook config_keys() must return a mapping "
                            f"of config key to input fields, not {type(result).__name__}"))
                        continue
                    keys.update(result)
                out += _config_key_sources(info.name, keys, errors)
            raise_all(errors)
            self._sources = out
        return self._sources

    def functions(self) -> list[tuple[str, Any]]:
        """(plugin name, Function) for every function, the core's first, checked."""
        if self._functions is None:
            out: list[tuple[str, Any]] = []
            owner: dict[str, str] = {}
            errors: list[DlfError] = []
            for info in self.infos:
                for fn in self._list(info, "functions"):
                    problem = _function_problem(fn, info.name == CORE)
                    if problem:
                        errors.append(ModelError(f"plugin '{info.name}': function "
                                                 f"{getattr(fn, 'name', fn)!r}: {problem}"))
                        continue
                    if fn.name in owner:
                        errors.append(ModelError(
                            f"plugin '{info.name}': function '{fn.name}' is already defined by "
                            f"plugin '{owner[fn.name]}'; rename one"))
                        continue
                    owner[fn.name] = info.name
                    out.append((info.name, fn))
            raise_all(errors)
            self._functions = out
        return self._functions

    def _added(self) -> list[tuple[str, Any]]:
        """The plugins' functions: those beyond the core's, which every runtime namespace and
        the formula language's table hold from the start (the same declarations)."""
        return [(owner, fn) for owner, fn in self.functions() if owner != CORE]

    def runtime_helpers(self) -> dict[str, tuple[Any, Any]]:
        """Runtime name -> (scalar, numpy) for CompiledModel.bind_functions (no sympy)."""
        from .runtime import helpers

        return helpers(fn for _, fn in self._added())

    def register_functions(self) -> None:
        """Teach the formula language this set's functions (imports sympy; cold path only)."""
        from . import expr

        expr.reset_plugin_functions()
        for _, fn in self._added():
            expr.register_function(fn)

    def cache_key(self) -> str:
        """What of the plugins, beyond their formula files, the generated code depends on."""
        from .runtime import runtime_name

        parts = [f"{fn.name}|{runtime_name(fn.name)}|{fn.args}|{fn.dims}|{fn.excel}|{owner}"
                 for owner, fn in self._added()]
        from .cache import Key

        return Key("functions", *parts).hex(64) if parts else ""

    def register_commands(self, cli: Any) -> list[str]:
        """Let every plugin add commands to `cli`; returns the names added."""
        before = set(getattr(cli, "commands", {}))
        for info in self.infos:
            self._call(info, "register_commands", cli)
        return sorted(set(getattr(cli, "commands", {})) - before)

    def hooks_of(self, info: PluginInfo) -> list[str]:
        names = []
        for obj in info.objects:
            for caller in self.pm.get_hookcallers(obj) or []:
                if caller.name not in names:
                    names.append(caller.name)
        return names

    def catalog(self, folders: list[DataFolder]) -> Any:
        """A hardware/preset catalog whose errors name the plugin a file comes from."""
        return MemoCatalog(folders, self)

    def origin_of_path(self, path: str) -> str | None:
        """The plugin whose data file (or config_keys source) is at `path`."""
        target = os.path.abspath(path)
        for folder in self.folders():
            if os.path.dirname(target) == os.path.abspath(str(folder.path)):
                return folder.origin
        for s in self.sources():
            if s.path == path:
                return s.origin
        return None

    def annotate(self, exc: DlfError) -> DlfError:
        """The same error(s), each naming the plugin whose file it is about."""
        from .errors import ErrorGroup

        def one(e: DlfError) -> DlfError:
            origin = self.origin_of_path(e.path) if e.path else None
            if origin is None or origin == CORE:
                return e
            new = type(e)(f"{e.message} (plugin '{origin}')", e.path, e.line)
            new.exit_code = e.exit_code
            return new

        if isinstance(exc, ErrorGroup):
            return ErrorGroup([one(e) for e in exc.errors])
        return one(exc)


class MemoCatalog(Catalog):
    """A catalog that reads each node or preset file once while the file is unchanged (by its
    stamp), and whose errors name the plugin a file comes from."""

    def __init__(self, folders: list[DataFolder], plugins: PluginSet | None = None) -> None:
        super().__init__(folders)
        self.plugins = plugins
        self._memo: dict[tuple[str, str], tuple[str, Any]] = {}

    def _read(self, kind: str, ident: str, where: Any, reader: Any) -> Any:
        from .cache import file_stamp

        entry = self._files[kind].get(ident)
        stamp = (file_stamp(os.fspath(entry[0]))
                 if entry is not None and isinstance(entry[0], os.PathLike) else "-")
        hit = self._memo.get((kind, ident))
        if hit is not None and hit[0] == stamp and stamp != "-":
            return hit[1]
        try:
            value = reader(ident, where)
        except DlfError as exc:
            raise (self.plugins.annotate(exc) if self.plugins is not None else exc) from None
        self._memo[(kind, ident)] = (stamp, value)
        return value

    def node(self, node_id: str, where: tuple[str | None, int | None] = (None, None)) -> Any:
        return self._read("hardware", node_id, where, super().node)

    def preset(self, preset_id: str, where: tuple[str | None, int | None] = (None, None)) -> Any:
        return self._read("presets", preset_id, where, super().preset)


# -- loading helpers ------------------------------------------------------------------------------
def _load_entry_points(env: Any, add: Any, errors: list[DlfError]) -> None:
    wanted_text = env.get(ENV_LOAD)
    wanted = None if wanted_text is None else {
        w.strip() for w in wanted_text.split(",") if w.strip()}
    if wanted is not None and not wanted:
        return
    found = installed_entry_points()
    names = {ep.name for ep in found}
    for name in sorted((wanted or set()) - names - set(BUILTIN_PLUGINS) - {CORE}):
        errors.append(ModelError(f"{ENV_LOAD} names '{name}', which is not an installed "
                                 f"plugin{did_you_mean(name, names)}; installed: "
                                 f"{', '.join(sorted(names)) or 'none'}"))
    for ep in found:
        if wanted is not None and ep.name not in wanted:
            continue
        origin = f"{ep.dist} {ep.version} (entry point {ep.name} = {ep.value})"
        try:
            obj = load_entry_point(ep)
        except Exception as exc:
            errors.append(ModelError(
                f"plugin '{ep.name}' ({origin}) cannot be imported: {type(exc).__name__}: "
                f"{exc}; fix or uninstall it, or leave it out with {ENV_LOAD}"))
            continue
        add(ep.name, ep.version, "entry point", origin, [obj])


def _load_folder(path_text: str, where: str, add: Any, errors: list[DlfError]) -> None:
    root = os.path.expanduser(path_text)
    if not os.path.isdir(root):
        errors.append(ModelError(f"{where}: plugin folder '{path_text}' does not exist or is "
                                 "not a folder"))
        return
    resolved = os.path.realpath(root)
    name = os.path.basename(resolved.rstrip(os.sep)) or resolved
    objects: list[Any] = [_LocalFolder(root)]
    init = os.path.join(root, "__init__.py")
    modules = [init] if os.path.isfile(init) else sorted(
        os.path.join(root, n) for n in os.listdir(root)
        if n.endswith(".py") and os.path.isfile(os.path.join(root, n)))
    for file in modules:
        try:
            objects.append(_import_file(file, name))
        except Exception as exc:
            errors.append(ModelError(f"plugin '{name}' ({display_path(root)}): cannot import "
                                     f"{os.path.basename(file)}: {type(exc).__name__}: {exc}"))
            return
    if len(objects) == 1 and not any(hasattr(objects[0], h) for h in FOLDER_HOOKS):
        errors.append(ModelError(f"{where}: plugin folder '{path_text}' has no formulas/, "
                                 "hardware/ or presets/ folder and no Python hooks"))
        return
    add(name, "", "folder", display_path(resolved), objects)


def _import_file(file: str, plugin: str) -> Any:
    """Import a local plugin's module under a private name (a package for __init__.py)."""
    import importlib.util

    safe = "".join(c if c.isalnum() else "_" for c in plugin)
    base = os.path.basename(file)
    if base == "__init__.py":
        modname = f"_dlformula_plugin_{safe}"
        spec = importlib.util.spec_from_file_location(
            modname, file, submodule_search_locations=[os.path.dirname(file)])
    else:
        modname = f"_dlformula_plugin_{safe}_{base[:-3]}"
        spec = importlib.util.spec_from_file_location(modname, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    return module


def _unknown_hooks(pm: Any, infos: list[PluginInfo]) -> list[DlfError]:
    """Misspelled hook names, one error per plugin and name (what check_pending rejects)."""
    from .hookspecs import HOOK_NAMES

    owners = {id(obj): info for info in infos for obj in info.objects}
    errors: list[DlfError] = []
    for name, caller in vars(pm.hook).items():
        if name.startswith("_") or caller.spec is not None:
            continue
        for impl in caller.get_hookimpls():
            if impl.optionalhook:
                continue
            info = owners.get(id(impl.plugin))
            who = f"plugin '{info.name}' ({info.origin})" if info else repr(impl.plugin)
            errors.append(ModelError(f"{who}: unknown hook '{name}'"
                                     f"{did_you_mean(name, HOOK_NAMES)}; hooks: "
                                     f"{', '.join(HOOK_NAMES)}"))
    no_hooks = [info for info in infos if info.kind != "folder" and info.objects
                and not any(pm.get_hookcallers(o) for o in info.objects)]
    for info in no_hooks:
        errors.append(ModelError(f"plugin '{info.name}' ({info.origin}) implements no hooks; "
                                 "mark its hook functions with @dlformula.hookspecs.hookimpl"))
    return errors


def _as_folder(item: Any) -> Any:
    if isinstance(item, DiskPath):
        return item
    if isinstance(item, (str, os.PathLike)):
        return DiskPath(item)
    if hasattr(item, "iterdir") and hasattr(item, "is_dir"):
        return item  # an importlib.resources Traversable
    return None


def _config_key_sources(plugin: str, keys: dict[str, Any],
                        errors: list[DlfError]) -> list[Source]:
    """Formula-file text declaring one input per config key, grouped by config section."""
    sections: dict[str, dict[str, Any]] = {}
    for key, fields in keys.items():
        if not isinstance(key, str) or not all(p.isidentifier() for p in key.split(".")) \
                or "." not in key:
            errors.append(ModelError(f"plugin '{plugin}': config key {key!r} from "
                                     "config_keys() must be SECTION.KEY, e.g. example.width"))
            continue
        if not isinstance(fields, dict):
            errors.append(ModelError(f"plugin '{plugin}': config key '{key}' needs a mapping "
                                     "of input fields (unit, default, domain, doc)"))
            continue
        fields = dict(fields)
        name = str(fields.pop("name", key.rsplit(".", 1)[1]))
        fields["config"] = key
        sections.setdefault(key.split(".", 1)[0], {})[name] = fields
    from .yamlfile import dump_yaml

    return [Source(f"<plugin {plugin}: config_keys()>/{section}.yaml",
                   dump_yaml({"inputs": inputs}), plugin)
            for section, inputs in sections.items()]


# -- functions ------------------------------------------------------------------------------------
def _function_problem(fn: Any, core: bool = False) -> str | None:
    from .hookspecs import Function

    if not isinstance(fn, Function):
        return "functions() must return dlformula.hookspecs.Function values"
    if not isinstance(fn.name, str) or not fn.name.isidentifier() or fn.name.startswith("_"):
        return "the name must be letters, digits and '_', not starting with '_'"
    if not core:  # (expr, and its imports, only when a plugin adds a function)
        from .expr import _BUILTIN_NAMES, _SPECIAL_CALLS

        if fn.name in _BUILTIN_NAMES or fn.name in _SPECIAL_CALLS:
            return "a built-in function has this name; choose another"
    if not callable(fn.python) or (fn.numpy is not None and not callable(fn.numpy)):
        return "python (and numpy, if given) must be callables"
    if fn.dims not in FUNCTION_DIMS:
        return f"dims must be one of {', '.join(FUNCTION_DIMS)}, not {fn.dims!r}"
    lo, hi = _arg_range(fn.args)
    if lo is None or lo < 1 or (hi is not None and hi < lo):
        return "args must be a count >= 1 or (min, max) with max None for any number"
    if fn.excel and not _excel_form_ok(fn.excel):
        return (f"excel must be a spreadsheet function name (CEILING) or a form with {{}} for "
                f"the arguments (CEILING({{}},1)), not {fn.excel!r}")
    return None


def _excel_form_ok(text: Any) -> bool:
    """A spreadsheet function name, or a form with `{}` where the arguments go."""
    if not isinstance(text, str):
        return False
    if "{}" not in text:
        return text.replace(".", "").isalnum()
    return all(c.isalnum() or c in ".,(){} " for c in text) and text.count("(") == text.count(")")


def _arg_range(args: Any) -> tuple[int | None, int | None]:
    if isinstance(args, int) and not isinstance(args, bool):
        return args, args
    if isinstance(args, tuple) and len(args) == 2 and isinstance(args[0], int) and (
            args[1] is None or isinstance(args[1], int)):
        return args[0], args[1]
    return None, None


# -- the process's plugin set -------------------------------------------------------------------
_DEFAULT: dict[tuple[str, ...], PluginSet] = {}
_CLI_PATHS: list[tuple[str, ...]] = []


def default() -> PluginSet:
    """The plugin set an `Engine()` uses: the core, built-in and installed plugins, the
    folders of DLFORMULA_PLUGINS and, inside a CLI invocation, those of --plugin. Loaded once
    per combination."""
    paths = _CLI_PATHS[-1] if _CLI_PATHS else ()
    # sys.path decides which distributions (entry points) are installed.
    key = (os.environ.get(ENV_PATHS, ""), os.environ.get(ENV_LOAD, "\0"), *paths, "\0",
           *sys.path)
    if key not in _DEFAULT:
        _DEFAULT[key] = PluginSet.load(paths)
    return _DEFAULT[key]


def push_cli_paths(paths: tuple[str, ...]) -> None:
    _CLI_PATHS.append(tuple(paths))


def pop_cli_paths() -> None:
    if _CLI_PATHS:
        _CLI_PATHS.pop()
