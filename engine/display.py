"""How a definition is shown, as its formula file says (issue 17: one home per concept).

Every field is optional and lives beside the formula, so a plugin's quantity is shown like a
core one:

- `display: percent`: a share, printed as 53.1 % (eval, explain, sweep, search, plots, workbook);
- `better: higher | lower`: the direction `search --objective NAME` optimises it in;
- `title: TEXT`: a short name for people (the workbook's Summary rows; `label` already means a
  choice's label);
- `short: TEXT`: a narrow column header (search's table);
- `summary: N`: a key result, rank N (lower first): `eval`'s first lines, the workbook Summary;
- `column: N`: one of the result columns of a table of layouts, rank N: search's (after the
  layout and the objective) and a sweep's by default (after the varied keys).

A formula file may say the same of its group (the file's name): `title:` (its workbook sheet)
and `order: N` (its rank among the groups: eval's table, the workbook's sheets); the files of
one group may not disagree.

`read_fields` checks them (the loader calls it for each input and quantity); the rest of this
module answers questions about a loaded model. No sympy, NumPy or YAML: report, table and
workbook code import it on the start-up path.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .errors import DlfError, ModelError

# field -> what it says (the loader's "allowed fields" list)
QUANTITY_FIELDS = {
    "display": "percent: a share printed as 53.1 %", "better": "higher or lower (search)",
    "title": "short name for people (workbook Summary)",
    "short": "narrow column header (search table)",
    "summary": "rank among the key results (eval, workbook Summary)",
    "column": "rank among the result columns (search, sweep)",
}
INPUT_FIELDS = {k: QUANTITY_FIELDS[k] for k in ("title", "short", "summary")}
GROUP_FIELDS = {"title": "the group's title (its workbook sheet)",
                "order": "rank of the group (eval's table, workbook sheets)"}
WORDS = {"display": ("percent",), "better": ("higher", "lower")}
TEXT_LIMITS = {"title": (40, "Memory per GPU"), "short": (16, "memory/GPU")}
MAX_RANK = 10**6
RANKS = {"summary": "the key results", "column": "the result columns of search and sweep",
         "order": "the groups"}


def read_fields(item: Any, fields: Iterable[str], path: str, what: str,
                errors: list[DlfError]) -> dict[str, Any]:
    """The display fields of one definition (a `Located` mapping) that it gives, checked; each
    bad value is an error at its line saying what to write."""
    out: dict[str, Any] = {}
    for key in fields:
        v = item.value.get(key)
        if v is None:
            continue
        problem = _problem(key, v.value)
        if problem:
            errors.append(ModelError(f"{what}: '{key}' is {v.value!r}; {problem} (or leave it "
                                     "out)", path, v.line))
        else:
            out[key] = v.value.strip() if isinstance(v.value, str) else v.value
    return out


def _problem(key: str, value: Any) -> str:
    if key in WORDS:
        return "" if value in WORDS[key] else "write " + " or ".join(WORDS[key])
    if key in TEXT_LIMITS:
        limit, example = TEXT_LIMITS[key]
        ok = (isinstance(value, str) and value.strip() and len(value.strip()) <= limit
              and value.isprintable())
        return "" if ok else (f"write one line of text of at most {limit} characters, e.g. "
                              f"'{example}'")
    ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_RANK
    return "" if ok else f"write its rank among {RANKS[key]}: a whole number, 1 comes first"


def inherit(new: Any, old: Any) -> Any:
    """An override is the same concept with another formula: how it is shown, where it does not
    say, stays as the definition it replaces says."""
    if type(new) is not type(old):
        return new
    keep = {k: getattr(old, k) for k in QUANTITY_FIELDS
            if hasattr(new, k) and not getattr(new, k) and getattr(old, k)}
    return new._replace(**keep) if keep else new


def ranked(defs: Iterable[Any], key: str) -> list[str]:
    """Names of the definitions with a rank in `key` ("summary", "column"), by rank; equal
    ranks keep the definitions' order."""
    found = [(getattr(d, key, 0), i, d.name) for i, d in enumerate(defs)]
    return [name for rank, _, name in sorted(found) if rank]


def result_columns(model: Any) -> list[str]:
    """The quantities search (and, by default, a sweep) shows as columns (`column:`), by
    rank."""
    return ranked(model.quantities.values(), "column")


def title(d: Any) -> str:
    """What people read for a definition: its `title`, else its name as words."""
    return getattr(d, "title", "") or d.name.replace("_", " ").capitalize()


def headers(model: Any, names: Iterable[str]) -> dict[str, str]:
    """Column headers of `names` where a definition gives a `short` one."""
    out: dict[str, str] = {}
    for n in names:
        d = model.quantities.get(n) or model.inputs.get(n)
        short = str(getattr(d, "short", "") or "")
        if short:
            out[n] = short
    return out


class Groups:
    """How each group is shown, gathered from its formula files while they are read."""

    def __init__(self) -> None:
        self.fields: dict[str, dict[str, tuple[Any, str]]] = {}  # group -> key -> value, where

    def read(self, root: Any, group: str, path: str, errors: list[DlfError]) -> None:
        from .errors import display_path

        given = read_fields(root, GROUP_FIELDS, path, "the formula file", errors)
        known = self.fields.setdefault(group, {})
        for key, value in given.items():
            line = root.value[key].line
            if key in known and known[key][0] != value:
                errors.append(ModelError(
                    f"'{key}: {value}' disagrees with '{key}: {known[key][0]}' at "
                    f"{known[key][1]} for group '{group}'; give it in one of the group's "
                    "files", path, line))
            known.setdefault(key, (value, f"{display_path(path)}:{line}"))

    def ranks(self) -> dict[str, tuple[str, int]]:
        """group -> (title or '', rank or 0)."""
        return {g: (str(f.get("title", ("", ""))[0]), int(f.get("order", (0, ""))[0]))
                for g, f in self.fields.items() if f}


def ordered_groups(model: Any, groups: Iterable[str]) -> list[str]:
    """Groups in their `order:` ranks, then the rest by name."""
    ranks = {g: rank for g, (_, rank) in model.groups.items() if rank}
    return sorted(set(groups), key=lambda g: (g not in ranks, ranks.get(g, 0), g))


def group_title(model: Any, group: str) -> str:
    """A group's `title:`, else its name as words."""
    title = model.groups.get(group, ("", 0))[0]
    return title or group.replace("_", " ").capitalize()
