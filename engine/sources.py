"""Formula sources: the text of each formula file and a digest of them all (the cache key).
Kept apart from loader.py so that a cached run never imports the loader."""

from __future__ import annotations

from typing import NamedTuple


class Source(NamedTuple):
    """One formula file: where it is (for messages), its text, and who contributed it."""

    path: str
    text: str
    origin: str = "dlformula"


def digest_sources(sources: list[Source]) -> str:
    import hashlib

    h = hashlib.sha256()
    for s in sources:
        for part in (s.origin, s.path, s.text):
            h.update(part.encode())
            h.update(b"\0")
    return h.hexdigest()
