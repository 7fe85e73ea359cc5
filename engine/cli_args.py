"""Command-line argument text turned into typed values, without click.

`--set SECTION.KEY=VALUE` is text on the command line; the library takes typed overrides
(`{"parallelism.tp": 4}`, see `Engine.evaluate`). The text is read here, as YAML reads a value
in a config file (`4`, `true`, `full`, `80 GiB`, `300e9`), and nowhere else: the fast `eval`
path (launch.py) and click's commands share it, and `Engine` uses it only for callers that
still pass a list of "KEY=VALUE" strings.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from .errors import UsageError


def parse_set(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """`["parallelism.tp=4"]` -> `{"parallelism.tp": 4}`; every malformed item is refused
    with the form to write."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or not all(p.isidentifier() for p in key.split(".")):
            raise UsageError(f"--set '{item}': write SECTION.KEY=VALUE, e.g. "
                             "--set parallelism.tp=4")
        try:
            value = _scalar(text)
        except UsageError:
            raise UsageError(f"--set '{item}': the value is not valid YAML; quote text, e.g. "
                             f"--set {key}='...'") from None
        if isinstance(value, _Container):
            raise UsageError(f"--set '{item}': the value must be a single number, word or "
                             "true/false")
        out[key] = value
    return out


class _Container:
    """What `_scalar` gives for a list or mapping (refused by parse_set)."""


@lru_cache(maxsize=4096)
def _scalar(text: str) -> Any:
    """The YAML value of one --set text, read once per process: validate, search and the
    leave-one-source-out fit pass the same few texts thousands of times."""
    from .yamlfile import load_yaml

    value = load_yaml(text or "null", "--set", UsageError).value
    return _Container() if isinstance(value, (dict, list)) else value
