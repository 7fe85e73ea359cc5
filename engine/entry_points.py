"""Installed plugins: which entry points of group `dlformula` exist, remembered between runs.

Asking importlib.metadata costs about 20 ms a run: it imports the email package and reads every
installed distribution's entry_points.txt. The answer depends only on what is installed, so it
is kept in the cache folder (DLFORMULA_CACHE_DIR, see model.cache_dir) together with a
fingerprint of everything importlib.metadata reads to find distributions. Installing, upgrading
or removing a distribution changes the fingerprint, and that run asks importlib.metadata again.
Loading an entry point imports its module as `EntryPoint.load()` does, without importing
importlib.metadata. plugin_manager.py decides which entry points to load and reports problems.
"""

from __future__ import annotations

import hashlib
import importlib
import marshal
import os
import sys
from pathlib import Path
from typing import Any, NamedTuple

GROUP = "dlformula"


class InstalledEntryPoint(NamedTuple):
    """One entry point of group `dlformula` as discovery found it (plain data, cacheable)."""

    name: str
    value: str  # "module" or "module:attr"
    dist: Any  # the distribution's name ("?" if unknown)
    version: str


CACHE_FORMAT = 1


def installed_entry_points() -> list[InstalledEntryPoint]:
    """Every entry point in group `dlformula`, sorted by name: from the cache folder while the
    installation's fingerprint is unchanged, else from importlib.metadata (and remembered)."""
    fingerprint = _install_fingerprint()
    path = _entry_point_cache_path() if fingerprint is not None else None
    if path is not None:
        try:
            fmt, cached_fingerprint, entries = marshal.loads(path.read_bytes())
            if fmt == CACHE_FORMAT and cached_fingerprint == fingerprint:
                return [InstalledEntryPoint(*entry) for entry in entries]
        except Exception:  # missing, corrupt or foreign: ask importlib.metadata
            pass
    found = _discover_entry_points()
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(marshal.dumps((CACHE_FORMAT, fingerprint,
                                           [tuple(ep) for ep in found])))
            os.replace(tmp, path)
        except (OSError, ValueError):
            pass  # a read-only cache folder still works, only slower
    return found


def _discover_entry_points() -> list[InstalledEntryPoint]:
    from importlib.metadata import entry_points

    out = []
    for ep in sorted(entry_points(group=GROUP), key=lambda ep: ep.name):
        dist = getattr(ep, "dist", None)
        version = getattr(dist, "version", "") or ""
        dist_name = dist.metadata["Name"] if dist is not None else "?"
        out.append(InstalledEntryPoint(ep.name, ep.value, dist_name, version))
    return out


def load_entry_point(ep: InstalledEntryPoint) -> Any:
    """What importlib.metadata's EntryPoint.load() returns, without importing it."""
    import re

    match = re.match(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$",
                     ep.value)
    if match is None:  # malformed: fail exactly as importlib.metadata does
        from importlib.metadata import EntryPoint

        return EntryPoint(ep.name, ep.value, GROUP).load()
    obj = importlib.import_module(match.group("module"))
    for attr in (match.group("attr") or "").split("."):
        if attr:
            obj = getattr(obj, attr)
    return obj


def _install_fingerprint() -> bytes | None:
    """A digest of everything importlib.metadata reads to find distributions: each sys.path
    entry (a zip by its stat, a folder by its stat and the names in it) and in each folder every
    .dist-info/.egg-info folder with the stat of its entry_points.txt and, if it has one, its
    metadata (name and version). About a millisecond. None when a finder on sys.meta_path other
    than the path finder lists distributions: those cannot be fingerprinted, so ask each time."""
    import stat
    from importlib.machinery import PathFinder

    for finder in sys.meta_path:
        if finder is not PathFinder and getattr(finder, "find_distributions", None) is not None:
            return None
    h = hashlib.sha256(f"{sys.version}|{CACHE_FORMAT}".encode())
    for entry in sys.path:
        if not isinstance(entry, (str, os.PathLike)):
            return None
        root = os.fspath(entry) or "."
        h.update(f"\0{root}\0".encode(errors="surrogateescape"))
        try:
            st = os.stat(root)
        except (OSError, ValueError):
            h.update(b"-")
            continue
        h.update(f"{st.st_ino},{st.st_mtime_ns},{st.st_size}".encode())
        if not stat.S_ISDIR(st.st_mode):
            continue
        try:
            names = sorted(os.listdir(root))
        except OSError:
            continue
        egg = root.lower().endswith(".egg")
        for name in names:
            low = name.lower()
            if not (low.endswith((".dist-info", ".egg-info")) or (egg and low == "egg-info")):
                continue
            folder = os.path.join(root, name)
            h.update(f"\0{name}".encode(errors="surrogateescape"))
            eps = _stat_text(os.path.join(folder, "entry_points.txt"))
            h.update(eps)
            if eps != b"-":
                h.update(_stat_text(os.path.join(folder, "METADATA")))
                h.update(_stat_text(os.path.join(folder, "PKG-INFO")))
    return h.digest()


def _stat_text(path: str) -> bytes:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return b"-"
    return f"|{st.st_ino},{st.st_mtime_ns},{st.st_size}".encode()


def _entry_point_cache_path() -> Path:
    from .model import cache_dir

    where = hashlib.sha256("\0".join(map(str, sys.path)).encode(errors="surrogateescape"))
    return cache_dir() / f"entry-points-{where.hexdigest()[:24]}.marshal"
