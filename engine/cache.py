"""The on-disk cache: where it is, how an entry is named, written, read back and pruned.

Every cached thing -- the compiled model, parsed YAML texts, the installed entry points, the
workbook's printed formulas -- goes through here, so they share one location
(`DLFORMULA_CACHE_DIR`, else `$XDG_CACHE_HOME/dlformula`, else `~/.cache/dlformula`), one way
of writing (a temporary file in the same folder, then an atomic rename: a reader sees the old
entry or the new one, never half of one) and one rule for failures (a missing, unreadable,
corrupt or foreign entry is a miss; a read-only cache folder makes a run slower, never wrong).

Entries are named by a key: a hash of everything the value depends on. This module is on every
command's start-up path, so it imports only os and marshal (no pathlib, no hashlib: blake2b
comes from the small `_blake2` module that hashlib itself wraps).
"""

from __future__ import annotations

import marshal
import os
from typing import Any

try:  # the builtin module hashlib wraps; importing hashlib also loads OpenSSL (about 2 ms)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - every CPython build has it
    from hashlib import blake2b


def cache_dir() -> str:
    """The cache folder (it may not exist yet)."""
    env = os.environ.get("DLFORMULA_CACHE_DIR")
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dlformula")


def entry_path(name: str) -> str:
    """Where the entry `name` (which may contain a subfolder, `yaml/abc.marshal`) lives."""
    return os.path.join(cache_dir(), name)


class Key:
    """A cache key under construction: `Key("model").add(text, ...).hex(32)`."""

    def __init__(self, *parts: str | bytes) -> None:
        self._h = blake2b(digest_size=32)
        self.add(*parts)

    def add(self, *parts: str | bytes) -> Key:
        for part in parts:
            self._h.update(part if isinstance(part, bytes)
                           else part.encode("utf-8", "surrogatepass"))
            self._h.update(b"\0")
        return self

    def copy(self) -> Key:
        new = Key.__new__(Key)
        new._h = self._h.copy()
        return new

    def hex(self, length: int = 32) -> str:
        return self._h.hexdigest()[:length]


def file_stamp(path: str) -> str:
    """What tells a file's content changed without reading it: inode, size and modification
    time in nanoseconds ('-' when the file is missing). A file rewritten in place keeps its
    inode but not its mtime; one replaced by a rename gets a new inode."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return "-"
    return f"{st.st_ino},{st.st_size},{st.st_mtime_ns}"


def read_bytes(name: str) -> bytes | None:
    """The entry's bytes, or None when it is missing or unreadable."""
    try:
        with open(entry_path(name), "rb") as fh:
            return fh.read()
    except (OSError, ValueError):
        return None


def write_bytes(name: str, data: bytes) -> bool:
    """Write the entry atomically (temporary file, then rename); False when the cache folder
    cannot be written (the caller goes on without a cache)."""
    path = entry_path(name)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        return True
    except (OSError, ValueError):
        try:
            os.remove(tmp)
        except OSError:
            pass
        return False


def load(name: str) -> Any:
    """The value stored with `store`, or None (missing, unreadable or corrupt)."""
    data = read_bytes(name)
    if data is None:
        return None
    try:
        return marshal.loads(data)
    except Exception:  # corrupt or from another Python: a miss
        return None


def store(name: str, value: Any) -> bool:
    """Keep a marshal-able value (plain data and code objects) under `name`."""
    try:
        data = marshal.dumps(value)
    except ValueError:  # not plain data
        return False
    return write_bytes(name, data)


def prune(folder: str, keep: int, suffix: str = ".marshal", prefix: str = "") -> int:
    """Keep the `keep` newest entries named `prefix...suffix` in the cache subfolder `folder`
    ("" for the cache folder itself); returns how many were removed."""
    path = entry_path(folder)
    try:
        with os.scandir(path) as it:
            entries = [(e.stat().st_mtime_ns, e.path) for e in it
                       if e.name.endswith(suffix) and e.name.startswith(prefix)]
    except OSError:
        return 0
    if len(entries) <= keep:
        return 0
    entries.sort()
    removed = 0
    for _, victim in entries[:len(entries) - keep]:
        try:
            os.remove(victim)
            removed += 1
        except OSError:
            pass
    return removed
