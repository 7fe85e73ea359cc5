"""Read YAML into values that remember their line.

PyYAML composes a node tree that carries positions; we turn it into `Located` values (value +
1-based line) so every later check can name `file:line`. Duplicate keys, which PyYAML would
silently collapse, are errors here. YAML 1.1 reads `300e9` as a string; we read it as a number,
because configs are full of such figures.

Every file dlformula reads goes through `read_file_text`: regular files only (not a device, a
FIFO or a folder), a size limit (`SMALL_FILE_LIMIT` for configs, formulas, hardware, presets and
Hugging Face configs, `LARGE_FILE_LIMIT` for runs files), UTF-8 or a one-line error naming the
line. Before PyYAML sees a text its nesting depth is checked (libyaml recurses in C), and while
it is converted aliases may expand to at most `ALIAS_EXPANSION_LIMIT` values and may not refer
to themselves; merge keys (`<<`) and tags other than the plain scalar ones are errors.

A text that parsed cleanly is remembered in the cache folder, keyed by its content (and by this
module and the installed PyYAML), so a warm `dlformula eval` reads its config, hardware node and
preset without importing PyYAML (about 12 ms). Texts with errors are never cached.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from . import cache
from .errors import DlfError, ModelError, raise_all

YAML_CACHE_FORMAT = 2
YAML_CACHE_ENTRIES = 512  # parsed texts kept; the oldest go when a new one is written
YAML_CACHE_MAX_BYTES = 16 << 20  # a parse bigger than this is not kept

SMALL_FILE_LIMIT = 4 << 20  # configs, formula files, hardware, presets, HF configs
LARGE_FILE_LIMIT = 64 << 20  # runs files
MAX_DEPTH = 64  # nested mappings/lists
ALIAS_EXPANSION_LIMIT = 10_000  # values that aliases may repeat in one file


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


def read_file_text(f: Any, what: str, error: type[DlfError] = ModelError,
                   limit: int = SMALL_FILE_LIMIT, shown: str | None = None) -> str:
    """The text of a file the program reads: `f` a path (str or os.PathLike) or a Traversable.
    A missing file, a folder, a device or FIFO, a file over `limit` bytes or one that is not
    UTF-8 is a one-line `error` naming the file (and the line of a bad byte)."""
    import os
    import stat

    from .errors import display_path

    fspath = _real_path(f)
    name = shown or display_path(fspath if fspath is not None else str(f))
    if fspath is None:  # a Traversable inside a zip or namespace package: read it bounded
        try:
            with f.open("rb") as fh:
                data = fh.read(limit + 1)
        except (OSError, ValueError, AttributeError) as exc:
            raise error(f"cannot read {what}: {_reason(exc)}", name) from None
    else:
        try:
            st = os.stat(fspath)
        except FileNotFoundError:
            raise error(f"{what} does not exist", name) from None
        except (OSError, ValueError) as exc:
            raise error(f"cannot read {what}: {_reason(exc)}", name) from None
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{what} is a folder, not a file; give the path of a file", name)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} is not a regular file (a device, pipe or socket); give the "
                        "path of a file on disk", name)
        if st.st_size > limit:
            raise error(f"{what} is {st.st_size:,} bytes, more than the {limit:,} a "
                        f"{what} may have; is this the right file?", name)
        try:
            # O_NONBLOCK: should the file have turned into a FIFO since stat, open does not wait
            fd = os.open(fspath, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            with os.fdopen(fd, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                    raise error(f"{what} is not a regular file; give the path of a file on "
                                "disk", name)
                data = fh.read(limit + 1)
        except OSError as exc:
            raise error(f"cannot read {what}: {_reason(exc)}", name) from None
    if len(data) > limit:
        raise error(f"{what} is more than {limit:,} bytes, the most a {what} may have; is "
                    "this the right file?", name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(f"{what} is not UTF-8 text (byte 0x{data[exc.start]:02x}); save it as "
                    "UTF-8", name, line) from None


def _real_path(f: Any) -> str | None:
    import os

    if isinstance(f, (str, os.PathLike)):
        return os.fspath(f)  # type: ignore[return-value]
    path = getattr(f, "path", None)  # DiskPath
    if isinstance(path, str):
        return path
    return None


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def read_yaml_file(f: Any, what: str, error: type[DlfError] = ModelError,
                   limit: int = SMALL_FILE_LIMIT, shown: str | None = None) -> Located:
    """`read_file_text` then `load_yaml`: the one way a YAML file is read."""
    from .errors import display_path

    text = read_file_text(f, what, error, limit, shown)
    fspath = _real_path(f)
    return load_yaml(text, shown or display_path(fspath if fspath is not None else str(f)),
                     error)


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

    _check_depth(text, path, error)
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
        raise error(f"YAML error: {str(exc).splitlines()[0]}", path) from None
    except RecursionError:
        raise error(f"YAML nested too deeply (more than {MAX_DEPTH} levels); flatten it",
                    path) from None
    if node is None:
        return Located({}, 1)
    errors: list[DlfError] = []
    walk = _Walk(path, error, errors)
    try:
        result = walk.convert(node, 0)
    except _Refused as exc:
        raise exc.error from None
    raise_all(errors)
    return result


class _Refused(Exception):
    """Stops a conversion that cannot go on (alias bomb, recursion, depth)."""

    def __init__(self, error: DlfError) -> None:
        super().__init__(str(error))
        self.error = error


def _check_depth(text: str, path: str, error: type[DlfError]) -> None:
    """Refuse flow collections (`[[[...`) nested deeper than MAX_DEPTH before libyaml, which
    recurses in C, sees them. Brackets inside quotes and comments are skipped; block nesting
    is bounded by the file size and checked while converting."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    import re

    depth = 0
    line = 1
    # tokens: newline, comment, quoted strings, brackets
    for m in re.finditer(r"\n|#[^\n]*|'(?:[^']|'')*'|\"(?:[^\"\\]|\\.)*\"|[\[\]{}]", text):
        tok = m.group()
        if tok == "\n":
            line += 1
        elif tok in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise error(f"YAML nested more than {MAX_DEPTH} levels deep; flatten it",
                            path, line)
        elif tok in "]}":
            depth = max(depth - 1, 0)
        elif tok[0] in "'\"":
            line += tok.count("\n")


_PLAIN_TAGS = {"tag:yaml.org,2002:" + t
               for t in ("str", "int", "float", "bool", "null", "map", "seq")}


class _Walk:
    """Node tree -> Located, with the limits of the module docstring."""

    def __init__(self, path: str, error: type[DlfError], errors: list[DlfError]) -> None:
        self.path, self.error, self.errors = path, error, errors
        self.seen: set[int] = set()
        self.repeats = 0  # values visited again through an alias
        self.open: set[int] = set()  # collections being converted (a recursive alias)

    def refuse(self, message: str, line: int | None) -> _Refused:
        return _Refused(self.error(message, self.path, line))

    def convert(self, node: Any, depth: int) -> Located:
        import yaml

        line = node.start_mark.line + 1
        ident = id(node)
        if ident in self.seen:
            self.repeats += 1
            if self.repeats > ALIAS_EXPANSION_LIMIT:
                raise self.refuse(f"aliases (*name) expand to more than "
                                  f"{ALIAS_EXPANSION_LIMIT:,} values; write the values out",
                                  line)
        else:
            self.seen.add(ident)
        if depth > MAX_DEPTH:
            raise self.refuse(f"YAML nested more than {MAX_DEPTH} levels deep; flatten it",
                              line)
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            if ident in self.open:
                raise self.refuse("an alias (*name) refers to the value that contains it; "
                                  "a value cannot contain itself", line)
            if node.tag not in _PLAIN_TAGS:
                self.errors.append(self.error(f"unsupported YAML tag {node.tag!r}; remove it",
                                              self.path, line))
                return Located(None, line)
            self.open.add(ident)
            try:
                if isinstance(node, yaml.MappingNode):
                    return self.mapping(node, depth, line)
                return Located([self.convert(v, depth + 1) for v in node.value], line)
            finally:
                self.open.discard(ident)
        return Located(self.scalar(node, line), line)

    def mapping(self, node: Any, depth: int, line: int) -> Located:
        import yaml

        out: dict[str, Located] = {}
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if key_node.tag == "tag:yaml.org,2002:merge":
                self.errors.append(self.error(
                    "YAML merge keys (<<) are not supported; write the keys out", self.path,
                    key_line))
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                self.errors.append(self.error("mapping keys must be plain names", self.path,
                                              key_line))
                continue
            key = str(self.scalar(key_node, key_line))
            if key in out:
                self.errors.append(self.error(
                    f"duplicate key '{key}' (first defined on line {out[key].line}); "
                    "remove one of them", self.path, key_line))
                continue
            value = self.convert(value_node, depth + 1)
            # A mapping entry is located at its key, which is where a reader looks.
            out[key] = Located(value.value, key_line)
        return Located(out, line)

    def scalar(self, node: Any, line: int) -> Any:
        if node.tag not in _PLAIN_TAGS:
            self.errors.append(self.error(
                f"unsupported YAML tag {node.tag!r} on {_short(node.value)}; write a plain "
                "number or text", self.path, line))
            return None
        constructor = _constructor()
        try:
            value = constructor.construct_object(node)
        except Exception as exc:  # `!!float x`, `!!int y`: the text does not fit its tag
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            self.errors.append(self.error(f"cannot read value {_short(node.value)}: "
                                          f"{problem}", self.path, line))
            return None
        finally:  # the constructor remembers what it built: forget it (memory, stale ids)
            constructor.constructed_objects.pop(node, None)
            constructor.recursive_objects.pop(node, None)
        return _plain_value(value, node, self.path, self.error, self.errors, line)


def _short(text: Any) -> str:
    s = repr(text)
    return s if len(s) <= 40 else s[:37] + "..."


def _plain_value(value: Any, node: Any, path: str, error: type[DlfError],
                 errors: list[DlfError], line: int) -> Any:
    if isinstance(value, (bytes, bytearray)) or not isinstance(
        value, (str, int, float, bool, type(None))
    ):
        # Timestamps, binary and other tagged values have no place in our files.
        errors.append(error(f"unsupported YAML value {_short(node.value)}; write a number or "
                            "text", path, line))
        value = None
    return value


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
    import os

    from .errors import UsageError

    if not os.path.lexists(path):
        raise UsageError(f"{what} '{path}' does not exist; {hint}")
    limit = LARGE_FILE_LIMIT if what.startswith("runs") else SMALL_FILE_LIMIT
    return read_yaml_file(path, what, UsageError, limit)


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


_STORED = [0]  # entries this process wrote since it last pruned


def _store(entry: str, result: Located | str) -> None:
    """Keep a parse (or a dump); keep the newest YAML_CACHE_ENTRIES (configs get edited, old
    texts pile up): pruned at a process's first write, then after every eighth of that many
    writes (a prune lists the folder; validate or a fuzz run writes thousands of new texts).
    A read-only cache folder still works, only slower."""
    import marshal

    try:
        data = marshal.dumps(result if isinstance(result, str) else _freeze(result))
    except ValueError:
        return
    if len(data) <= YAML_CACHE_MAX_BYTES and cache.write_bytes(entry, data):
        _STORED[0] += 1
        if _STORED[0] == 1 or _STORED[0] > YAML_CACHE_ENTRIES // 8:
            cache.prune("yaml", YAML_CACHE_ENTRIES)
            _STORED[0] = 1


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
