"""Read YAML into values that remember their line.

PyYAML composes a node tree that carries positions; we turn it into `Located` values (value +
1-based line) so every later check can name `file:line`. Duplicate keys, which PyYAML would
silently collapse, are errors here. YAML 1.1 reads `300e9` as a string; we read it as a number,
because configs are full of such figures.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import yaml

from .errors import DlfError, ModelError, raise_all

_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    pass


# `1e9`, `300e9`, `2.5E-3`: floats in YAML 1.2 and in every config we will ever read.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)

_constructor = yaml.constructor.SafeConstructor()


class Located(NamedTuple):
    """A YAML value with the line it starts on. Mappings hold `dict[str, Located]`."""

    value: Any
    line: int

    def plain(self) -> Any:
        """The value with all location wrappers removed."""
        v = self.value
        if isinstance(v, dict):
            return {k: item.plain() for k, item in v.items()}
        if isinstance(v, list):
            return [item.plain() for item in v]
        return v


def load_yaml(text: str, path: str, error: type[DlfError] = ModelError) -> Located:
    """Parse `text` (from `path`) into a `Located` tree; raise `error` naming file and line."""
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "cannot parse"
        raise error(
            f"YAML syntax error: {problem}; fix the indentation or quoting on this line",
            path, line,
        ) from None
    except yaml.YAMLError as exc:
        raise error(f"YAML error: {exc}", path) from None
    if node is None:
        return Located({}, 1)
    errors: list[DlfError] = []
    result = _convert(node, path, error, errors)
    raise_all(errors)
    return result


def _convert(node: yaml.Node, path: str, error: type[DlfError], errors: list[DlfError]) -> Located:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Located] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                errors.append(error("mapping keys must be plain names", path,
                                    key_node.start_mark.line + 1))
                continue
            key = str(_constructor.construct_object(key_node))
            key_line = key_node.start_mark.line + 1
            if key in out:
                errors.append(error(
                    f"duplicate key '{key}' (first defined on line {out[key].line}); "
                    "remove one of them", path, key_line))
                continue
            value = _convert(value_node, path, error, errors)
            # A mapping entry is located at its key, which is where a reader looks.
            out[key] = Located(value.value, key_line)
        return Located(out, line)
    if isinstance(node, yaml.SequenceNode):
        return Located([_convert(v, path, error, errors) for v in node.value], line)
    try:
        value = _constructor.construct_object(node)
    except yaml.constructor.ConstructorError as exc:
        errors.append(error(f"cannot read value: {exc.problem}", path, line))
        value = None
    if isinstance(value, (bytes, bytearray)) or not isinstance(
        value, (str, int, float, bool, type(None))
    ):
        # Timestamps, binary and other tagged values have no place in our files.
        errors.append(error(f"unsupported YAML value {node.value!r}; write a number or text",
                            path, line))
        value = None
    return Located(value, line)


def check_keys(
    mapping: Located, allowed: dict[str, str], path: str, what: str, errors: list[DlfError],
    error: type[DlfError] = ModelError,
) -> None:
    """Append an error for every key of `mapping` not in `allowed` (key -> short description)."""
    from .errors import did_you_mean

    for key, item in mapping.value.items():
        if key not in allowed:
            known = ", ".join(sorted(allowed))
            errors.append(error(
                f"unknown field '{key}' in {what}{did_you_mean(key, allowed)}; "
                f"allowed fields: {known}", path, item.line))


def read_user_yaml(path: str, what: str, hint: str) -> Located:
    """Read a YAML file the user names (a config, a runs file): a missing or unreadable file,
    or bad YAML, is a one-line UsageError; `hint` says what to give instead."""
    from .errors import UsageError, display_path

    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise UsageError(f"{what} '{path}' does not exist; {hint}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {what} '{path}': {exc}") from None
    return load_yaml(text, display_path(path), UsageError)
