"""Data folders on disk without pathlib or importlib.resources.

`DiskPath` has the few methods of an `importlib.resources` Traversable the engine calls
(`iterdir`, `is_dir`, `is_file`, `name`, `read_text`, `read_bytes`, `/`), built on os.path, and
is os.PathLike. `package_folder("dlformula.formulas")` finds an installed data package's folder
from the package's own `__path__`; only when that is not a folder on disk (a zip import, a
namespace package spread over several folders) does it fall back to importlib.resources.

Why: importing importlib.resources pulls in tempfile, shutil, bz2, lzma and random (about 3 ms),
and pathlib about 2 ms, on every command's start-up, for what os.listdir does here.
"""

from __future__ import annotations

import os
from typing import Any


class DiskPath:
    """A file or folder on disk, read like an importlib.resources Traversable."""

    __slots__ = ("path",)

    def __init__(self, path: Any) -> None:
        self.path = os.fspath(path)

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"DiskPath({self.path!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DiskPath) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    @property
    def name(self) -> str:
        return os.path.basename(self.path.rstrip(os.sep)) or self.path

    def is_dir(self) -> bool:
        return os.path.isdir(self.path)

    def is_file(self) -> bool:
        return os.path.isfile(self.path)

    def iterdir(self) -> list[DiskPath]:
        return [DiskPath(os.path.join(self.path, n)) for n in os.listdir(self.path)]

    def joinpath(self, *parts: str) -> DiskPath:
        return DiskPath(os.path.join(self.path, *parts))

    def __truediv__(self, part: str) -> DiskPath:
        return self.joinpath(part)

    def read_bytes(self) -> bytes:
        with open(self.path, "rb") as fh:
            return fh.read()

    def read_text(self, encoding: str = "utf-8") -> str:
        with open(self.path, encoding=encoding) as fh:
            return fh.read()


def package_folder(package: str) -> Any:
    """The folder of an installed package (a DiskPath when it is a folder on disk, else the
    importlib.resources Traversable)."""
    import importlib

    module = importlib.import_module(package)
    paths = list(getattr(module, "__path__", None) or [])
    if len(paths) == 1 and os.path.isdir(paths[0]):
        return DiskPath(paths[0])
    from importlib import resources

    return resources.files(package)


def real_folder(folder: Any) -> str | None:
    """The on-disk path of a data folder (a DiskPath, a string, a pathlib.Path, or a
    Traversable that is a real folder), or None when it is not one (a zip, a namespace
    package): then its files can only be read, not stat'ed."""
    if isinstance(folder, (str, os.PathLike)):
        path = os.fspath(folder)
        return path if isinstance(path, str) and os.path.isdir(path) else None
    return None
