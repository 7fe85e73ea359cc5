"""Simulated failures, for the tests and bench/fuzz.py: a disk that fills up while an output
file is written. Not used by any command; it lives beside `atomic.py` because it replaces the
seam that module opens its temporary files through (`atomic._create`)."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class FullDisk:
    """A file whose writes fail with ENOSPC once `room` bytes are written."""

    def __init__(self, fh: Any, room: int) -> None:
        self._fh, self._room = fh, room

    def write(self, data: Any) -> Any:
        self._room -= len(data)
        if self._room < 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self._fh.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)


@contextmanager
def full_disk(room: int) -> Iterator[None]:
    """Inside the block, every output file `atomic` writes runs out of space after `room`
    bytes."""
    from . import atomic

    real = atomic._create
    atomic._create = lambda path, binary: FullDisk(real(path, binary), room)
    try:
        yield
    finally:
        atomic._create = real
