"""Regenerate the terminal session in README.md from real command output.

    python docs/update_readme.py          # rewrite README.md
    python docs/update_readme.py --check  # exit 1 if README.md is out of date

The commands are the `$ dlformula ...` lines already in the session block; their output is
replaced by what they print now. tests/test_docs.py runs the --check form.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"(<!-- session:.*?-->\n```console\n)(.*?)(```\n<!-- end session -->)",
                   re.S)


def run(command: str) -> str:
    from dlformula.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        main(shlex.split(command)[1:])
    # Built-in data files are shown where they are installed; the README shows them as in a
    # checkout, so the session reads the same from an editable or a regular install.
    return re.sub(r"\S*?/dlformula/(formulas|hardware|presets)/", r"\1/",
                  out.getvalue() + err.getvalue())


def render(text: str) -> str:
    match = BLOCK.search(text)
    if not match:
        sys.exit("README.md has no session block")
    commands = [line[2:] for line in match.group(2).splitlines() if line.startswith("$ ")]
    body = "".join(f"$ {c}\n{run(c)}" for c in commands)
    return text[: match.start(2)] + body + text[match.end(2):]


def main() -> int:
    import os

    os.chdir(README.parent)
    text = README.read_text()
    new = render(text)
    if "--check" in sys.argv:
        if new != text:
            print("README.md session is out of date: run python docs/update_readme.py")
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
