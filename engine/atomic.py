"""Output files written whole or not at all (issue 14).

Every file a command writes for the user -- `export`'s workbook, `sweep -o` and `search -o`
tables, `plot -o` images, `calibrate -o` nodes -- is written to a temporary file in the target's
folder, flushed and fsync'ed, then renamed over the target: a reader (or a crash, a full disk,
Ctrl-C, SIGTERM) sees the old file or the new one, never half of one. On any failure the
temporary file is removed, the existing file is left untouched and the error is one line
(`UsageError`: exit 2). While a file is open SIGTERM raises `Terminated` (a KeyboardInterrupt),
so the same clean-up runs; `exits.guarded` turns it into exit code 143.

The cache has its own, quieter variant (`cache.write_bytes`: a failure there is a miss).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from .errors import UsageError


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived while an output file was being written."""


_OPEN: list[AtomicFile] = []  # files being written (the SIGTERM handler is installed meanwhile)
_PREVIOUS_HANDLER: list[Any] = []


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def _install() -> None:
    import signal
    import threading

    if _PREVIOUS_HANDLER or threading.current_thread() is not threading.main_thread():
        return
    try:
        _PREVIOUS_HANDLER.append(signal.signal(signal.SIGTERM, _on_sigterm))
    except (ValueError, OSError, AttributeError):  # no signals here (embedded, Windows)
        pass


def _uninstall() -> None:
    import signal

    if _PREVIOUS_HANDLER and not _OPEN:
        previous = _PREVIOUS_HANDLER.pop()
        try:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        except (ValueError, OSError):
            pass


def _create(path: str, binary: bool) -> Any:
    """The temporary file, opened for writing (tests replace this to simulate failures)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    return os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


class AtomicFile:
    """A file being written under a temporary name: `write` (text or bytes), then `commit`
    (fsync, rename into place) or `abort` (remove). Usable as a context manager: an exception
    (or KeyboardInterrupt) inside the block aborts."""

    def __init__(self, path: str, binary: bool = False, what: str = "file") -> None:
        self.path, self.what = str(path), what
        folder = os.path.dirname(os.path.abspath(self.path))
        if os.path.isdir(self.path):
            raise UsageError(f"cannot write '{self.path}': it is a folder; give a file name")
        if not os.path.isdir(folder):
            raise UsageError(f"cannot write '{self.path}': the folder "
                             f"'{os.path.dirname(self.path) or '.'}' does not exist")
        base = os.path.basename(self.path)
        self.tmp = os.path.join(folder, f".{base}.{os.getpid()}.tmp")
        try:
            self.fh: Any = _create(self.tmp, binary)
        except OSError as exc:
            raise UsageError(f"cannot write '{self.path}': {_reason(exc)}") from None
        self.done = False
        _OPEN.append(self)
        _install()

    # -- writing ----------------------------------------------------------------------------
    def write(self, data: Any) -> int:
        try:
            return self.fh.write(data)
        except OSError as exc:
            self.abort()
            raise self._error(exc) from None

    def flush(self) -> None:
        self.fh.flush()

    def seek(self, *args: Any) -> int:
        return self.fh.seek(*args)

    def tell(self) -> int:
        return self.fh.tell()

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def read(self, *args: Any) -> Any:
        return self.fh.read(*args)

    def _error(self, exc: BaseException) -> UsageError:
        return UsageError(f"cannot write '{self.path}': {_reason(exc)}; nothing was written "
                          "(an existing file is untouched)")

    # -- ending -----------------------------------------------------------------------------
    def commit(self) -> None:
        if self.done:
            return
        try:
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
            os.replace(self.tmp, self.path)
        except OSError as exc:
            self.abort()
            raise self._error(exc) from None
        self._finish()
        _fsync_folder(os.path.dirname(os.path.abspath(self.path)))

    close = commit  # a stream's close(): the writers of table.py call it when done

    def abort(self) -> None:
        if self.done:
            return
        with quiet_unraisable():
            try:
                self.fh.close()
            except (OSError, ValueError):
                pass
        try:
            os.remove(self.tmp)
        except OSError:
            pass
        self._finish()

    def _finish(self) -> None:
        self.done = True
        if self in _OPEN:
            _OPEN.remove(self)
        _uninstall()

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if kind is None:
            self.commit()
        else:
            self.abort()
            if exc is not None:
                forget_frames(exc)


def write_file(path: str, produce: Callable[[Any], None], binary: bool = True,
               what: str = "file") -> None:
    """Write `path` whole or not at all: `produce(fh)` writes into the temporary file. An
    OSError (a full disk) becomes one UsageError line; any exception or signal removes the
    temporary file and leaves an existing `path` untouched."""
    out = AtomicFile(path, binary, what)
    try:
        produce(out if not binary else _Binary(out))
    except UsageError:
        out.abort()
        raise
    except OSError as exc:
        out.abort()
        forget_frames(exc)
        raise out._error(exc) from None
    except BaseException as exc:
        out.abort()
        forget_frames(exc)
        raise
    out.commit()


class _Binary:
    """The AtomicFile as zipfile/matplotlib want a binary file object (write raising OSError
    as itself, so the library's own clean-up runs)."""

    def __init__(self, out: AtomicFile) -> None:
        self._out = out

    def write(self, data: Any) -> int:
        return self._out.fh.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._out.fh, name)


class quiet_unraisable:
    """Silence 'Exception ignored in ...' messages (a ZipFile closing over a failed write in
    its __del__) while a failed write is cleaned up."""

    def __enter__(self) -> None:
        self.hook = sys.unraisablehook
        sys.unraisablehook = lambda *_: None

    def __exit__(self, *exc: Any) -> None:
        sys.unraisablehook = self.hook


def forget_frames(exc: BaseException) -> None:
    """Drop what the failed writer's frames hold (an open ZipFile or a write-only sheet whose
    finaliser would write to a closed file and print a traceback), now, with such messages
    silenced. Frames still running are skipped."""
    import gc

    with quiet_unraisable():
        seen = 0
        while exc is not None and seen < 4:
            tb = exc.__traceback__
            while tb is not None:
                try:
                    tb.tb_frame.clear()
                except RuntimeError:  # a frame still executing (the caller's)
                    pass
                tb = tb.tb_next
            exc = exc.__context__  # type: ignore[assignment]
            seen += 1
        gc.collect()


def _fsync_folder(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
