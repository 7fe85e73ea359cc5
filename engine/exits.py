"""Where errors become what a user sees: one line per problem on stderr and an exit code (2 for
input to fix, 1 for model data), `internal error` for a bug. The program's two paths -- the
fast `eval` (launch.py) and click (cli.py) -- both run their command through `guarded`."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any


def guarded(run: Callable[[], Any]) -> Any:
    """Run a command; every error becomes one line per problem on stderr and an exit code."""
    from .errors import DlfError

    try:
        return run()
    except DlfError as exc:
        for line in exc.lines():
            sys.stderr.write(f"error: {one_line(line)}\n")
        return exc.exit_code
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM while an output file was written
        from .atomic import Terminated

        return 143 if isinstance(exc, Terminated) else 130
    except BrokenPipeError:
        sys.stderr.close()  # output piped into `head`: not an error
        return 0
    except Exception as exc:  # a bug, not bad input: one line, traceback on request
        if os.environ.get("DLFORMULA_DEBUG"):
            raise
        sys.stderr.write(f"internal error: {type(exc).__name__}: {exc} (this is a dlformula "
                         "bug; rerun with DLFORMULA_DEBUG=1 for the traceback and report "
                         "it)\n")
        return 1


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(32), 127, 0x85]}
_CONTROL.update({0x2028: "\\u2028", 0x2029: "\\u2029"})
_CONTROL.update({9: "\\t", 10: "\\n", 13: "\\r"})


def one_line(text: str) -> str:
    """A message as one printable line: control characters (a newline or carriage return in
    a value someone typed) shown escaped, surrogates from undecodable bytes replaced."""
    if text.isprintable():
        return text
    return text.translate(_CONTROL).encode("utf-8", "replace").decode("utf-8")
