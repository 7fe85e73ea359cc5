"""Read YAML into values that remember their line.

PyYAML composes a node tree that carries positions; we turn it into `Located` values (value +
1-based line) so every later check can name `file:line`. Duplicate keys, which PyYAML would
silently collapse, are errors here. YAML 1.1 reads `300e9` as a string; we read it as a number,
because configs are full of such figures.

A text that parsed cleanly is remembered in the cache folder, keyed by its content (and by this
module and the installed PyYAML), so a warm `dlformula eval` reads its config, hardware node and
preset without importing PyYAML (about 12 ms). Texts with errors are never cached.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from . import cache
from .errors import DlfError, ModelError, raise_all

YAML_CACHE_FORMAT = 1
YAML_CACHE_ENTRIES = 512  # parsed texts kept; the oldest go when a new one is written


class Located(NamedTuple):
    """A YAML value with the line it starts on. Mappings hold `dict[str, Located]`."""

    value: Any
    line: int

    def plain(self) -> Any:
        """The value with all location wrappers removed."""
        v = self.value
        if isinstance(v, dict):
            return {k: item.plain() for k, item in v.items()}
        if isinstance(v, list):
            return [item.plain() for item in v]
        return v


def load_yaml(text: str, path: str, error: type[DlfError] = ModelError) -> Located:
    """Parse `text` (from `path`) into a `Located` tree; raise `error` naming file and line."""
    entry = _cache_entry(text)
    if entry is not None:
        try:
            return _thaw(cache.load(entry))
        except Exception:  # not cached yet, or unreadable: parse
            pass
    result = _parse(text, path, error)
    if entry is not None:
        _store(entry, result)
    return result


def _parse(text: str, path: str, error: type[DlfError]) -> Located:
    import yaml

    try:
        node = yaml.compose(text, Loader=_loader())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "cannot parse"
        raise error(
            f"YAML syntax error: {problem}; fix the indentation or quoting on this line",
            path, line,
        ) from None
    except yaml.YAMLError as exc:
        raise error(f"YAML error: {exc}", path) from None
    if node is None:
        return Located({}, 1)
    errors: list[DlfError] = []
    result = _convert(node, path, error, errors)
    raise_all(errors)
    return result


def _convert(node: Any, path: str, error: type[DlfError], errors: list[DlfError]) -> Located:
    import yaml

    constructor = _constructor()
    line = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Located] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                errors.append(error("mapping keys must be plain names", path,
                                    key_node.start_mark.line + 1))
                continue
            key = str(constructor.construct_object(key_node))
            key_line = key_node.start_mark.line + 1
            if key in out:
                errors.append(error(
                    f"duplicate key '{key}' (first defined on line {out[key].line}); "
                    "remove one of them", path, key_line))
                continue
            value = _convert(value_node, path, error, errors)
            # A mapping entry is located at its key, which is where a reader looks.
            out[key] = Located(value.value, key_line)
        return Located(out, line)
    if isinstance(node, yaml.SequenceNode):
        return Located([_convert(v, path, error, errors) for v in node.value], line)
    try:
        value = constructor.construct_object(node)
    except yaml.constructor.ConstructorError as exc:
        errors.append(error(f"cannot read value: {exc.problem}", path, line))
        value = None
    if isinstance(value, (bytes, bytearray)) or not isinstance(
        value, (str, int, float, bool, type(None))
    ):
        # Timestamps, binary and other tagged values have no place in our files.
        errors.append(error(f"unsupported YAML value {node.value!r}; write a number or text",
                            path, line))
        value = None
    return Located(value, line)


def check_keys(
    mapping: Located, allowed: dict[str, str], path: str, what: str, errors: list[DlfError],
    error: type[DlfError] = ModelError,
) -> None:
    """Append an error for every key of `mapping` not in `allowed` (key -> short description)."""
    from .errors import did_you_mean

    for key, item in mapping.value.items():
        if key not in allowed:
            known = ", ".join(sorted(allowed))
            errors.append(error(
                f"unknown field '{key}' in {what}{did_you_mean(key, allowed)}; "
                f"allowed fields: {known}", path, item.line))


def read_user_yaml(path: str, what: str, hint: str) -> Located:
    """Read a YAML file the user names (a config, a runs file): a missing or unreadable file,
    or bad YAML, is a one-line UsageError; `hint` says what to give instead."""
    from .errors import UsageError, display_path

    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise UsageError(f"{what} '{path}' does not exist; {hint}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {what} '{path}': {exc}") from None
    return load_yaml(text, display_path(path), UsageError)


def dump_yaml(data: Any) -> str:
    """`yaml.safe_dump(data, sort_keys=False)`, remembered in the cache folder by the exact
    data (for plugins' config_keys, turned into formula text on every run)."""
    import marshal

    try:
        packed = marshal.dumps(data)
    except ValueError:  # not plain data: no key to cache it under
        packed = None
    entry = _cache_entry(packed, "dump") if packed is not None else None
    if entry is not None:
        text = cache.load(entry)
        if isinstance(text, str):
            return text
    import yaml

    text = yaml.safe_dump(data, sort_keys=False)
    if entry is not None:
        _store(entry, text)
    return text


# -- PyYAML, imported only when a text is not in the cache --------------------------------------
_LOADER: list[Any] = []


def _loader() -> Any:
    """The safe loader (libyaml's when available) that also reads `300e9` as a number."""
    if not _LOADER:
        import re

        import yaml

        base: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

        class Loader(base):  # type: ignore[misc,valid-type]
            pass

        # `1e9`, `300e9`, `2.5E-3`: floats in YAML 1.2 and in every config we will ever read.
        Loader.add_implicit_resolver(
            "tag:yaml.org,2002:float",
            re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
            list("-+0123456789"),
        )
        _LOADER[:] = [Loader, yaml.constructor.SafeConstructor()]
    return _LOADER[0]


def _constructor() -> Any:
    _loader()
    return _LOADER[1]


# -- the parsed-text cache ------------------------------------------------------------------------
_CACHE_KEY: list[Any] = []


def _cache_key() -> Any:
    """A key of what parsing depends on besides the text -- Python, this module and the
    installed PyYAML, each file by its stamp -- once per process; None without PyYAML (then
    nothing is cached). PyYAML is found without importing it."""
    if not _CACHE_KEY:
        key = None
        try:
            import sys
            from importlib.machinery import PathFinder

            spec = PathFinder.find_spec("yaml")
            if spec is not None and spec.origin:
                key = cache.Key("yaml", str(YAML_CACHE_FORMAT), sys.version)
                for file in (__file__, spec.origin):
                    key.add(file, cache.file_stamp(file))
        except Exception:
            key = None
        _CACHE_KEY.append(key)
    return _CACHE_KEY[0]


def _cache_entry(content: str | bytes, kind: str = "parse") -> str | None:
    """The cache entry (in the cache folder's yaml/) of the parse of a text, or of the dump of
    packed data; None when nothing is cached."""
    key = _cache_key()
    if key is None:
        return None
    return f"yaml/{key.copy().add(kind, content).hex(40)}.marshal"


def _cache_file(content: str | bytes, kind: str = "parse") -> str | None:
    """Where that entry is on disk."""
    entry = _cache_entry(content, kind)
    return cache.entry_path(entry) if entry is not None else None


def _store(entry: str, result: Located | str) -> None:
    """Keep a parse (or a dump); keep the newest YAML_CACHE_ENTRIES (configs get edited, old
    texts pile up). A read-only cache folder still works, only slower."""
    if cache.store(entry, result if isinstance(result, str) else _freeze(result)):
        cache.prune("yaml", YAML_CACHE_ENTRIES)


def _freeze(item: Located) -> tuple[Any, int]:
    """A Located tree as marshal-able data: (value, line), containers holding the same."""
    v = item.value
    if isinstance(v, dict):
        return {k: _freeze(x) for k, x in v.items()}, item.line
    if isinstance(v, list):
        return [_freeze(x) for x in v], item.line
    return v, item.line


def _thaw(data: tuple[Any, int]) -> Located:
    v, line = data
    if isinstance(v, dict):
        return Located({k: _thaw(x) for k, x in v.items()}, line)
    if isinstance(v, list):
        return Located([_thaw(x) for x in v], line)
    return Located(v, line)
