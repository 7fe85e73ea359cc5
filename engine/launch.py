"""The `dlformula` program's entry point: a plain `eval` runs without click, everything else
through click (cli.py).

Importing click costs a warm `eval` about 12 ms of its ~40 (inspect, typing, uuid, datetime,
gettext come with it). An invocation such as

    dlformula [--no-cache] [--plugin PATH] eval CONFIG [--set K=V]... [--only P]
              [--format F] [--brief] [--breakdown layer] [--hf-config PATH]

is read here instead, with click's rules for these options (`--opt VALUE` or `--opt=VALUE`,
options before or after CONFIG, a repeated `--set`), and runs the very code click's `eval`
runs (eval_command.py). Anything else -- `--help`, an unknown or repeated option, a missing
value, a value click would refuse, a plugin that adds commands -- goes to click untouched, so
click stays the one parser of record: this path only ever accepts what click accepts, and
tests/test_startup.py checks that its option table equals click's `eval` command.

Errors become one line per problem and an exit code in `exits.guarded`, for both paths.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .exits import guarded

# option -> "flag", "one" (a value), "many" (repeatable) or the tuple of accepted values
GROUP_OPTIONS: dict[str, Any] = {"--no-cache": "flag", "--plugin": "many"}
EVAL_OPTIONS: dict[str, Any] = {
    "--set": "many", "--hf-config": "one", "--only": "one",
    "--format": ("table", "json", "csv", "yaml"), "--brief": "flag", "--breakdown": ("layer",),
}
PATH_OPTIONS = ("--hf-config",)  # click.Path(dir_okay=False): a folder is refused by click


def _option(args: list[str], i: int, table: dict[str, Any], seen: dict[str, Any]) -> int:
    """Read the option at args[i] into `seen`; the index after it, or -1 to leave it to click."""
    name, eq, value = args[i].partition("=")
    kind = table.get(name)
    if kind is None:
        return -1
    if kind == "flag":
        if eq or name in seen:
            return -1
        seen[name] = True
        return i + 1
    if not eq:
        if i + 1 >= len(args):
            return -1
        value, i = args[i + 1], i + 1
    if isinstance(kind, tuple) and value not in kind:
        return -1
    if kind == "many":
        seen.setdefault(name, []).append(value)
    elif name in seen:
        return -1
    else:
        seen[name] = value
    return i + 1


def fast_eval_args(args: list[str]) -> dict[str, Any] | None:
    """The options of a plain `eval` invocation, or None when click should read it."""
    seen: dict[str, Any] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i = _option(args, i, GROUP_OPTIONS, seen)
        if i < 0:
            return None
    if i >= len(args) or args[i] != "eval":
        return None
    i += 1
    config = None
    while i < len(args):
        token = args[i]
        if token.startswith("-") and token != "-":
            i = _option(args, i, EVAL_OPTIONS, seen)
            if i < 0:
                return None
        elif config is None:
            config, i = token, i + 1
        else:
            return None
    if config is None or os.path.isdir(config):
        return None
    if any(os.path.isdir(seen[o]) for o in PATH_OPTIONS if o in seen):
        return None
    seen["config"] = config
    return seen


def _run_eval(options: dict[str, Any]) -> int | None:
    """Run `eval` as click's command would; None when a plugin adds commands (click then runs
    the invocation, so their registration is checked as usual)."""
    from . import plugin_manager
    from .core import Engine
    from .eval_command import eval_output

    plugin_manager.push_cli_paths(tuple(options.get("--plugin", ())))
    try:
        plugins = plugin_manager.default()
        if plugins.pm.hook.register_commands.get_hookimpls():
            return None
        engine = Engine(use_cache=not options.get("--no-cache", False))
        warnings, text = eval_output(
            engine, options["config"], options.get("--set", []), options.get("--hf-config"),
            options.get("--only"), options.get("--format", "table"),
            options.get("--brief", False), options.get("--breakdown"))
    finally:
        plugin_manager.pop_cli_paths()
    for line in warnings:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run `dlformula ARGS` (default: sys.argv[1:]); returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    options = fast_eval_args(args)
    if options is not None:
        code = guarded(lambda: _run_eval(options))
        if code is not None:
            return code
    from .cli import main as click_main

    return click_main(args)


def entry() -> None:
    """The console script `dlformula` and `python -m dlformula`."""
    sys.exit(main())
