"""How a definition is shown, as its formula file says (issue 17: one home per concept).

Every field is optional and lives beside the formula, so a plugin's quantity is shown like a
core one:

- `display: percent`: a share, printed as 53.1 % (eval, explain, sweep, search, plots, workbook);
- `better: higher | lower`: the direction `search --objective NAME` optimises it in;
- `title: TEXT`: a short name for people (the workbook's Summary rows; `label` already means a
  choice's label);
- `short: TEXT`: a narrow column header (search's table);
- `summary: N`: a key result, rank N (lower first): `eval`'s first lines, the workbook Summary;
- `column: N`: one of search's result columns, rank N, after the layout and the objective.

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
    "column": "rank among search's result columns",
}
INPUT_FIELDS = {k: QUANTITY_FIELDS[k] for k in ("title", "short", "summary")}
WORDS = {"display": ("percent",), "better": ("higher", "lower")}
TEXT_LIMITS = {"title": (40, "Memory per GPU"), "short": (16, "memory/GPU")}
MAX_RANK = 10**6
RANKS = {"summary": "the key results", "column": "search's result columns"}


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
    """The quantities search shows as columns (`column:`), by rank."""
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
