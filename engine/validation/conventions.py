"""Source conventions as data: conventions.yaml beside this module, read once per process.

How sources spell keys, accelerators, precisions, recompute modes and schedules, what a
framework does where a run is silent, and the values published recipes used. Every row of the
file cites its source; a malformed row is a ModelError at its line (the file ships with
dlformula, so a mistake in it is ours, exit 1).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, NamedTuple

from ..errors import DlfError, ModelError, raise_all
from ..yamlfile import Located, check_keys, load_yaml

# Config keys a row may never set: they would feed a measurement back into the prediction.
RESERVED_KEYS = {"training.achieved_flops_per_gpu"}

# texts: id, source, notes, arch, schedule, precision and routing (a run's routing: line)
# together; recipe: the run's recipe (framework) block as "key: value" lines, kept apart so
# that rules on texts do not see it;
# vendor: the maker of the run's hardware node, as its hardware file names it ('NVIDIA', 'AMD').
TEXTS = ("id", "source", "notes", "arch", "schedule", "precision", "routing", "texts", "recipe",
         "vendor")
WHEN_FIELDS = {**{t: "regex the text must match" for t in TEXTS},
               **{f"not_{t}": "regex the text must not match" for t in TEXTS},
               "published_before": "{arxiv: YYMM, year: YYYY}",
               "unset": "[config keys] the run leaves out (a convention that only fills gaps)",
               "config": "{config key: value or [values]} the mapped config must have",
               "not_config": "{config key: value or [values]} the mapped config must not have",
               "skip_negated": "true: a match right after 'no', 'not' or 'without' does not count"}

# What makes a mention negated for `skip_negated`: the words right before it.
NEGATED = re.compile(r"(?i)\b(no|not|without)\s+$")
# A pattern whose first element scans to the end of the text ((?=..., [\s\S]*, .*): re.search
# tries it at every position, so its cost grows with the square of a run's texts (one such
# pattern took 0.35 s a run on 3,000 characters). Anchored with \A it is tried once.
UNANCHORED_SCAN = re.compile(r"^(\(\?[aiLmsux]+\))*(\(\?=|\[\\s\\S\][*+]|\.[*+])")


class Pattern(NamedTuple):
    """A regex over a run's text and what it means."""

    regex: re.Pattern[str]
    value: Any
    note: str | None
    source: str
    line: int


class Variant(NamedTuple):
    regex: re.Pattern[str]
    node: str
    sets: dict[str, Any]
    note: str
    source: str


class Switch(NamedTuple):
    key: str
    on: Any  # a number, or {"input": config key} for that input's default
    off: Any
    note: str
    source: str
    on_text: re.Pattern[str] | None = None  # free text that means on ("userbuffers (...=True)")
    off_text: re.Pattern[str] | None = None

    def read(self, text: str) -> bool | None:
        """On or off from a run's free text, off first ("... = False" beats a mechanism's
        name), or None when the text says neither."""
        if self.off_text is not None and self.off_text.search(text):
            return False
        if self.on_text is not None and self.on_text.search(text):
            return True
        return None


class Rule(NamedTuple):
    """A framework convention: when `when` holds, set `sets` (a run's own values win)."""

    name: str
    when: dict[str, Any]
    sets: dict[str, Any]
    note: str
    source: str
    line: int


class Recipe(NamedTuple):
    knob: str
    when: dict[str, Any]
    value: Any
    source: str
    line: int


class Conventions(NamedTuple):
    sections: dict[str, str]  # spelling of a top-level block -> section
    keys: dict[tuple[str, str], str]  # (section, spelling) -> canonical runs-file key
    sources: dict[str, str]  # canonical key -> where its spellings come from
    accelerators: list[Pattern]  # value: node id
    variants: list[Variant]
    precisions: list[Pattern]
    recompute: list[Pattern]
    schedules: list[Pattern]
    choices: dict[str, dict[str, str]]  # config key -> spelling -> label
    switches: dict[str, Switch]  # config key -> switch
    frameworks: list[Rule]
    recipes: list[Recipe]


def spelling(name: str) -> str:
    """A key as the tables hold it: lower case, '-' and ' ' as '_'."""
    return re.sub(r"[\s-]+", "_", name.strip().lower())


@lru_cache(maxsize=1)
def conventions() -> Conventions:
    """The shipped conventions.yaml, parsed and checked."""
    from importlib import resources

    path = resources.files("dlformula.validation") / "conventions.yaml"
    return parse(path.read_text(encoding="utf-8"), str(path))


def parse(text: str, path: str) -> Conventions:
    """Conventions from YAML text; every problem is reported at its line."""
    root = load_yaml(text, path, ModelError)
    errors: list[DlfError] = []
    reader = _Reader(path, errors)
    body = root.value if isinstance(root.value, dict) else {}
    check_keys(root, {k: k for k in _SECTIONS}, path, "conventions", errors)
    rows = {name: reader.rows(body.get(name), name) for name in _SECTIONS}
    sections = {spelling(n): str(reader.need(r, "section").value) for r in rows["sections"]
                for n in reader.words(r, "names")}
    keys: dict[tuple[str, str], str] = {}
    sources: dict[str, str] = {}
    for r in rows["keys"]:
        reader.fields(r, {"key", "in", "names", "source"}, "keys")
        key = str(reader.need(r, "key").value)
        sources[key] = str(reader.need(r, "source").value)
        for section in reader.words(r, "in"):
            for name in reader.words(r, "names"):
                keys[(section, spelling(name))] = key
    switches = {}
    for r in rows["switches"]:
        reader.fields(r, {"key", "names", "enabled", "disabled", "on_text", "off_text", "note",
                          "source"}, "switches")
        key = str(reader.need(r, "key").value)
        texts = {k: reader.regex(r.value[k]) if k in r.value else None
                 for k in ("on_text", "off_text")}
        switches[key] = Switch(key, reader.need(r, "enabled").plain(),
                               reader.need(r, "disabled").plain(),
                               str(reader.need(r, "note").value),
                               str(reader.need(r, "source").value), **texts)
        prefix, field = key.split(".", 1)  # the config key's prefix names its runs-file section
        canonical = f"{'parallel' if prefix == 'parallelism' else prefix}.{field}"
        for name in reader.words(r, "names"):
            for section in ("parallel", "training", "framework"):
                keys[(section, spelling(name))] = canonical
    conv = Conventions(
        sections=sections, keys=keys, sources=sources,
        accelerators=[reader.pattern(r, "accelerators", "node") for r in rows["accelerators"]],
        variants=[reader.variant(r) for r in rows["variants"]],
        precisions=[reader.pattern(r, "precisions") for r in rows["precisions"]],
        recompute=[reader.pattern(r, "recompute") for r in rows["recompute"]],
        schedules=[reader.pattern(r, "schedules") for r in rows["schedules"]],
        choices={str(reader.need(r, "key").value): {spelling(k): str(v) for k, v in
                                                     reader.need(r, "values").plain().items()}
                 for r in rows["choices"]},
        switches=switches,
        frameworks=[reader.rule(r) for r in rows["frameworks"]],
        recipes=[reader.recipe(r) for r in rows["recipes"]])
    raise_all(errors)
    return conv


_SECTIONS = ("sections", "keys", "accelerators", "variants", "precisions", "recompute",
             "schedules", "choices", "switches", "frameworks", "recipes")


class _Reader:
    """Reads rows of conventions.yaml, collecting every problem with its line."""

    def __init__(self, path: str, errors: list[DlfError]) -> None:
        self.path = path
        self.errors = errors

    def fail(self, message: str, line: int) -> None:
        self.errors.append(ModelError(message, self.path, line))

    def rows(self, item: Located | None, name: str) -> list[Located]:
        if item is None:
            return []
        if not isinstance(item.value, list):
            self.fail(f"'{name}' must be a list of rows", item.line)
            return []
        good = [r for r in item.value if isinstance(r.value, dict)]
        for r in item.value:
            if not isinstance(r.value, dict):
                self.fail(f"each row of '{name}' must be a mapping", r.line)
        return good

    def fields(self, row: Located, allowed: set[str], what: str) -> None:
        check_keys(row, {k: k for k in allowed}, self.path, f"a row of '{what}'", self.errors)

    def need(self, row: Located, key: str) -> Located:
        item = row.value.get(key)
        if item is None:
            self.fail(f"this row needs '{key}'", row.line)
            return Located("", row.line)
        return item

    def words(self, row: Located, key: str) -> list[str]:
        if key not in row.value:
            self.need(row, key)
            return []
        item = row.value[key]
        if not isinstance(item.value, list):
            self.fail(f"'{key}' must be a list", item.line)
            return []
        return [str(w.value) for w in item.value]

    def regex(self, item: Located) -> re.Pattern[str]:
        text = str(item.value)
        if UNANCHORED_SCAN.match(text):
            self.fail(f"'{text[:60]}' starts with a lookahead or a wildcard that scans the rest "
                      "of the text from every position it is tried at (quadratic in the text's "
                      "length); anchor it with \\A or start it with a literal", item.line)
        try:
            return re.compile(text, re.IGNORECASE)
        except re.error as exc:
            self.fail(f"'{item.value}' is not a regular expression: {exc}", item.line)
            return re.compile(r"(?!)")

    def pattern(self, row: Located, what: str, value_key: str = "value") -> Pattern:
        self.fields(row, {"match", value_key, "why", "note", "source"}, what)
        value = self.need(row, value_key).value
        note = row.value.get("why") or row.value.get("note")
        return Pattern(self.regex(self.need(row, "match")), value,
                       None if note is None else str(note.value),
                       str(self.need(row, "source").value), row.line)

    def variant(self, row: Located) -> Variant:
        self.fields(row, {"match", "node", "set", "note", "source"}, "variants")
        return Variant(self.regex(self.need(row, "match")), str(self.need(row, "node").value),
                       self.need(row, "set").plain(), str(self.need(row, "note").value),
                       str(self.need(row, "source").value))

    def when(self, row: Located) -> dict[str, Any]:
        item = row.value.get("when")
        if item is None:
            return {}
        if not isinstance(item.value, dict):
            self.fail("'when' must be a mapping of conditions", item.line)
            return {}
        check_keys(item, WHEN_FIELDS, self.path, "'when'", self.errors)
        out: dict[str, Any] = {}
        for key, cond in item.value.items():
            if key in ("config", "not_config", "published_before"):
                out[key] = cond.plain() if isinstance(cond.value, dict) else {}
            elif key == "unset":
                out[key] = [str(k) for k in cond.plain()] if isinstance(cond.value, list) else []
            elif key == "skip_negated":
                if not isinstance(cond.value, bool):
                    self.fail("'skip_negated' must be true or false", cond.line)
                out[key] = cond.value is True
            else:
                out[key] = self.regex(cond)
        return out

    def rule(self, row: Located) -> Rule:
        self.fields(row, {"name", "when", "set", "note", "source"}, "frameworks")
        return Rule(str(self.need(row, "name").value), self.when(row),
                    self.need(row, "set").plain(), str(self.need(row, "note").value),
                    str(self.need(row, "source").value), row.line)

    def recipe(self, row: Located) -> Recipe:
        self.fields(row, {"knob", "when", "value", "source"}, "recipes")
        return Recipe(str(self.need(row, "knob").value), self.when(row),
                      self.need(row, "value").value, str(self.need(row, "source").value),
                      row.line)


# -- reading a run's text against the tables -----------------------------------------------------

def first_match(table: list[Pattern], text: str) -> Pattern | None:
    """The first row of `table` whose pattern is found in `text`."""
    for row in table:
        if row.regex.search(text):
            return row
    return None


def published(source: str, before: dict[str, Any]) -> str | None:
    """'as arXiv 2104' or 'in 2021' when `source` dates a run before `before`, else None."""
    m = re.search(r"arxiv[:\s]*(\d{4})\.\d{4,5}", source, re.IGNORECASE)
    if m:
        return f"as arXiv {m.group(1)}" if int(m.group(1)) < int(before["arxiv"]) else None
    m = re.search(r"\b(20[0-9]{2})\b", source)
    if m and int(m.group(1)) < int(before["year"]):
        return f"in {m.group(1)}"
    return None


def holds(when: dict[str, Any], texts: dict[str, str], config: dict[str, Any]) -> bool:
    """Whether a row's texts and the config mapped so far meet the conditions `when`."""
    skip_negated = when.get("skip_negated", False)
    for key, cond in when.items():
        if key == "skip_negated":
            continue
        if key == "published_before":
            if published(texts["source"], cond) is None:
                return False
        elif key == "unset":
            if any(k in config for k in cond):
                return False
        elif key in ("config", "not_config"):
            for ckey, want in cond.items():
                wanted = want if isinstance(want, list) else [want]
                # null among the values: the run does not give the key
                has = any(ckey not in config if w is None else _same(config.get(ckey), w)
                          for w in wanted)
                if has != (key == "config"):
                    return False
        elif key.startswith("not_"):
            if mentions(cond, texts[key[4:]], skip_negated):
                return False
        elif not mentions(cond, texts[key], skip_negated):
            return False
    return True


def mentions(regex: re.Pattern[str], text: str, skip_negated: bool) -> bool:
    """Whether `regex` matches `text`; with `skip_negated`, only where the match does not come
    right after 'no', 'not' or 'without' ('no torch.compile' does not mention compiling)."""
    if not skip_negated:
        return regex.search(text) is not None
    return any(not NEGATED.search(text[:m.start()]) for m in regex.finditer(text))


def _same(have: Any, want: Any) -> bool:
    if have is None:
        return False
    if isinstance(want, bool) or isinstance(have, bool):
        return have is want or (isinstance(have, str) and have.lower() == str(want).lower())
    if isinstance(want, (int, float)) and isinstance(have, (int, float)):
        return float(have) == float(want)
    return str(have).lower() == str(want).lower()
