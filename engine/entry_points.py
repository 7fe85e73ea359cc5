"""Installed plugins: which entry points of group `dlformula` exist, remembered between runs.

Asking importlib.metadata costs about 20 ms a run: it imports the email package and reads every
installed distribution's entry_points.txt. The answer depends only on what is installed, so it
is kept in the cache folder (see cache.py) together with a fingerprint of everything
importlib.metadata reads to find distributions. Installing, upgrading or removing a
distribution changes the fingerprint, and that run asks importlib.metadata again; any other
file appearing in a folder on sys.path (the working directory, under `python -c`) does not.
Loading an entry point imports its module as `EntryPoint.load()` does, without importing
importlib.metadata. plugin_manager.py decides which entry points to load and reports problems.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, NamedTuple

from . import cache

GROUP = "dlformula"


class InstalledEntryPoint(NamedTuple):
    """One entry point of group `dlformula` as discovery found it (plain data, cacheable)."""

    name: str
    value: str  # "module" or "module:attr"
    dist: Any  # the distribution's name ("?" if unknown)
    version: str


CACHE_FORMAT = 2


def installed_entry_points() -> list[InstalledEntryPoint]:
    """Every entry point in group `dlformula`, sorted by name: from the cache folder while the
    installation's fingerprint is unchanged, else from importlib.metadata (and remembered)."""
    fingerprint = _install_fingerprint()
    name = _entry_point_cache_name() if fingerprint is not None else None
    if name is not None:
        try:
            fmt, cached_fingerprint, entries = cache.load(name)
            if fmt == CACHE_FORMAT and cached_fingerprint == fingerprint:
                return [InstalledEntryPoint(*entry) for entry in entries]
        except Exception:  # missing, corrupt or foreign: ask importlib.metadata
            pass
    found = _discover_entry_points()
    if name is not None:  # (a read-only cache folder still works, only slower)
        cache.store(name, (CACHE_FORMAT, fingerprint, [tuple(ep) for ep in found]))
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
    entry (a zip by its stat; a folder by the .dist-info/.egg-info folders in it, each with the
    stat of its entry_points.txt and, if it has one, its metadata: name and version). Other
    names in a folder do not count, so a file created in the working directory (on sys.path
    under `python -c`) keeps the cache. About a millisecond. None when a finder on
    sys.meta_path other than the path finder lists distributions: those cannot be
    fingerprinted, so ask each time."""
    import stat
    from importlib.machinery import PathFinder

    for finder in sys.meta_path:
        if finder is not PathFinder and getattr(finder, "find_distributions", None) is not None:
            return None
    h = cache.Key(sys.version, str(CACHE_FORMAT))
    for entry in sys.path:
        if not isinstance(entry, (str, os.PathLike)):
            return None
        root = os.fspath(entry) or "."
        h.add(f"\0{root}\0")
        try:
            st = os.stat(root)
        except (OSError, ValueError):
            h.add("-")
            continue
        if not stat.S_ISDIR(st.st_mode):
            h.add(f"{st.st_ino},{st.st_mtime_ns},{st.st_size}")
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
            eps = cache.file_stamp(os.path.join(folder, "entry_points.txt"))
            h.add(name, eps)
            if eps != "-":
                h.add(cache.file_stamp(os.path.join(folder, "METADATA")),
                      cache.file_stamp(os.path.join(folder, "PKG-INFO")))
    return h.hex(64).encode()


def _entry_point_cache_name() -> str:
    """The cache entry for this sys.path."""
    return f"entry-points-{cache.Key(*map(str, sys.path)).hex(24)}.marshal"


def _entry_point_cache_path() -> str:
    return cache.entry_path(_entry_point_cache_name())
