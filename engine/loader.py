"""Load stage: formula files (YAML) -> checked, immutable definitions -> a `FormulaSet`.

All problems found while loading are collected and reported together, each naming its
`file:line` and the fix: YAML syntax, duplicate keys, unknown fields, bad units and domains,
names defined twice without `override: true`, undefined names (with "did you mean"), cycles
(`a --> b --> a`) and unit mismatches.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from . import display
from . import expr as exprmod
from .defs import (
    ConstantDef,
    ConstraintDef,
    Definition,
    Domain,
    InputDef,
    QuantityDef,
    parse_domain,
)
from .errors import DlfError, ModelError, did_you_mean, display_path, raise_all
from .sources import Source, digest_sources
from .units import UnitSyntaxError, format_dim, parse_unit
from .yamlfile import Located, check_keys, load_yaml

TOP_FIELDS = {
    "inputs": "values a config sets", "constants": "fixed numbers with units",
    "quantities": "formulas", "constraints": "conditions a runnable layout meets",
    "warnings": "conditions whose failure deserves a warning",
    "summary": "(moved: 'summary: N' in each key result)",
    **display.GROUP_FIELDS,
}
INPUT_FIELDS = {
    "unit": "unit text", "default": "value when the config is silent", "domain": "valid values",
    "doc": "one-line description", "config": "dotted config key", "choices": "label: code",
    "source": "where the figure comes from", "override": "replace an earlier definition",
    "search": "how search varies it: gpus, domain, choices or divisors:CONFIG.KEY",
    **display.INPUT_FIELDS,
}
# `search:` rules: divisors of the GPU count, every value of a bounded domain, every choice,
# or the divisors of another input's value.
SEARCH_RULE = re.compile(r"gpus|domain|choices|divisors:[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_.]*")
CONSTANT_FIELDS = {
    "value": "the number", "unit": "unit text", "doc": "one-line description",
    "source": "where it comes from", "override": "replace an earlier definition",
}
QUANTITY_FIELDS = {
    "expr": "the formula", "unit": "unit of the result", "doc": "one-line description",
    "source": "where the formula comes from", "override": "replace an earlier definition",
    **display.QUANTITY_FIELDS,
}
CONSTRAINT_FIELDS = {
    "name": "short id", "check": "condition that must hold", "message": "what is wrong and the fix",
}


@dataclass
class FormulaSet:
    """Everything the formula files define, checked, with sympy expressions built."""

    inputs: dict[str, InputDef]
    constants: dict[str, ConstantDef]
    quantities: dict[str, QuantityDef]
    constraints: list[ConstraintDef]
    summary: list[str]  # the key results, by rank
    exprs: dict[str, Any]  # quantity name -> sympy expression
    conditions: list[Any]  # constraint index -> sympy boolean
    order: list[str]  # quantities in dependency order
    deps: dict[str, list[str]]  # quantity -> names it uses directly
    overridden: dict[str, list[Definition]] = field(default_factory=dict)
    digest: str = ""
    sources: list[Source] = field(default_factory=list)
    groups: dict[str, tuple[str, int]] = field(default_factory=dict)  # group -> title, rank

    def names(self) -> list[str]:
        return [*self.inputs, *self.constants, *self.quantities]


def read_definitions(source: Source, errors: list[DlfError], groups: display.Groups | None = None
                     ) -> tuple[list[Definition], list[ConstraintDef]]:
    """Parse one formula file into definitions, appending every problem to `errors` (and how
    its group is shown to `groups`)."""
    path = source.path
    group = path.replace("\\", "/").rsplit("/", 1)[-1].rsplit(".", 1)[0]
    try:
        root = load_yaml(source.text, path)
    except DlfError as exc:
        errors.append(exc)
        return [], []
    if not isinstance(root.value, dict):
        errors.append(ModelError("a formula file is a mapping with inputs, constants, "
                                 "quantities, constraints", path, root.line))
        return [], []
    check_keys(root, TOP_FIELDS, path, "the formula file", errors)
    if groups is not None:
        groups.read(root, group, path, errors)
    defs: list[Definition] = []
    for section, reader in (("inputs", _read_input), ("constants", _read_constant),
                            ("quantities", _read_quantity)):
        block = root.value.get(section)
        if block is None or block.value is None:
            continue
        if not isinstance(block.value, dict):
            errors.append(ModelError(f"'{section}' must map names to definitions", path,
                                     block.line))
            continue
        for name, item in block.value.items():
            if not name.isidentifier() or name.startswith("_"):
                errors.append(ModelError(f"'{name}' is not a valid name: use letters, digits "
                                         "and '_', not starting with a digit or '_'", path,
                                         item.line))
                continue
            if keyword.iskeyword(name) or not name.isascii():
                errors.append(ModelError(f"'{name}' is a reserved word of the generated code "
                                         "(or not plain ASCII); choose another name", path,
                                         item.line))
                continue
            if not isinstance(item.value, dict):
                errors.append(ModelError(f"'{name}' must be a mapping of fields", path,
                                         item.line))
                continue
            d = reader(name, item, path, group, errors)
            if d is not None:
                defs.append(d)
    constraints = _read_constraints(root.value.get("constraints"), path, group, errors)
    constraints += _read_constraints(root.value.get("warnings"), path, group, errors, "warning")
    if "summary" in root.value:
        errors.append(ModelError("a file-wide 'summary' list is no longer read: write "
                                 "'summary: N' (its rank) in each key result's own definition",
                                 path, root.value["summary"].line))
    return defs, constraints


def _text(item: Located, key: str, path: str, what: str, errors: list[DlfError],
          required: bool = True) -> str:
    v = item.value.get(key)
    if v is None or v.value is None:
        if required:
            errors.append(ModelError(f"{what} has no '{key}'; every definition needs a {key}",
                                     path, item.line))
        return ""
    if not isinstance(v.value, str):
        errors.append(ModelError(f"'{key}' of {what} must be text", path, v.line))
        return ""
    return v.value.strip()


def _unit(item: Located, path: str, what: str, errors: list[DlfError]) -> str:
    v = item.value.get("unit")
    if v is None or v.value is None:
        errors.append(ModelError(f"{what} has no 'unit'; write 1 for a pure number", path,
                                 item.line))
        return "1"
    try:
        parse_unit(v.value)
    except UnitSyntaxError as exc:
        errors.append(ModelError(f"{exc} (in {what})", path, v.line))
        return "1"
    return str(v.value)


def _override(item: Located, path: str, errors: list[DlfError]) -> bool | str:
    """`override: true` replaces a definition; `override: PLUGIN` replaces that plugin's
    replacement of it (the explicit order when two plugins replace one name)."""
    v = item.value.get("override")
    if v is None:
        return False
    if isinstance(v.value, str) and v.value.strip():
        return v.value.strip()
    if not isinstance(v.value, bool):
        errors.append(ModelError("'override' must be true, false or the name of the plugin "
                                 "whose definition this one replaces", path, v.line))
        return False
    return v.value


def _read_input(name: str, item: Located, path: str, group: str,
                errors: list[DlfError]) -> InputDef | None:
    what = f"input '{name}'"
    check_keys(item, INPUT_FIELDS, path, what, errors)
    unit = _unit(item, path, what, errors)
    doc = _text(item, "doc", path, what, errors)
    config = _text(item, "config", path, what, errors)
    if config and not all(p.isidentifier() for p in config.split(".")):
        errors.append(ModelError(f"config key '{config}' of {what} must be dotted names, "
                                 "e.g. parallelism.tp", path, item.value["config"].line))
    source = _text(item, "source", path, what, errors, required=False)
    choices: tuple[tuple[str, int], ...] = ()
    ch = item.value.get("choices")
    if ch is not None:
        if not isinstance(ch.value, dict) or not ch.value or not all(
                isinstance(c.value, int) and not isinstance(c.value, bool)
                for c in ch.value.values()):
            errors.append(ModelError(f"'choices' of {what} must map each label to an integer "
                                     "code, e.g. {none: 0, selective: 1, full: 2}", path,
                                     ch.line))
        else:
            choices = tuple((k, c.value) for k, c in ch.value.items())
    dom_item = item.value.get("domain")
    if choices:
        domain = Domain("choice", text="one of " + ", ".join(c for c, _ in choices))
    elif dom_item is None:
        errors.append(ModelError(f"{what} has no 'domain'; write e.g. 'integer >= 1', "
                                 "'number > 0', 'boolean' or give 'choices'", path, item.line))
        return None
    else:
        try:
            domain = parse_domain(dom_item.value)
        except ValueError as exc:
            errors.append(ModelError(f"bad domain for {what}: {exc}", path, dom_item.line))
            return None
    default = item.value.get("default")
    default_value = None if default is None else default.value
    if default_value is not None:
        problem = domain.problem(default_value, tuple(c for c, _ in choices))
        if problem:
            errors.append(ModelError(f"default {default_value!r} of {what} {problem}", path,
                                     default.line))  # type: ignore[union-attr]
    return InputDef(name, unit, doc, default_value, domain, config, choices, source, path,
                    item.line, group, _override(item, path, errors),
                    _search_rule(item, path, what, errors),
                    **display.read_fields(item, display.INPUT_FIELDS, path, what, errors))


def _search_rule(item: Located, path: str, what: str, errors: list[DlfError]) -> str:
    v = item.value.get("search")
    if v is None:
        return ""
    if not isinstance(v.value, str) or not SEARCH_RULE.fullmatch(v.value.strip()):
        errors.append(ModelError(f"{what}: search rule {v.value!r} is not one of gpus, domain, "
                                 "choices, divisors:CONFIG.KEY (e.g. divisors:model.layers)",
                                 path, v.line))
        return ""
    return v.value.strip()


def _read_constant(name: str, item: Located, path: str, group: str,
                   errors: list[DlfError]) -> ConstantDef | None:
    what = f"constant '{name}'"
    check_keys(item, CONSTANT_FIELDS, path, what, errors)
    v = item.value.get("value")
    if v is None or isinstance(v.value, bool) or not isinstance(v.value, (int, float)):
        errors.append(ModelError(f"{what} needs a numeric 'value'", path, item.line))
        return None
    if not _finite(v.value):
        errors.append(ModelError(f"{what}: {v.value!r} is not a finite number a float can "
                                 "hold (|x| < 1.8e308)", path, v.line))
        return None
    return ConstantDef(name, v.value, _unit(item, path, what, errors),
                       _text(item, "doc", path, what, errors),
                       _text(item, "source", path, what, errors), path, item.line, group,
                       _override(item, path, errors))


def _finite(v: float | int) -> bool:
    import math

    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def _read_quantity(name: str, item: Located, path: str, group: str,
                   errors: list[DlfError]) -> QuantityDef | None:
    what = f"quantity '{name}'"
    check_keys(item, QUANTITY_FIELDS, path, what, errors)
    e = item.value.get("expr")
    if e is None or e.value is None or isinstance(e.value, bool) or not isinstance(
            e.value, (str, int, float)):
        errors.append(ModelError(f"{what} needs an 'expr' (the formula as text)", path,
                                 item.line))
        return None
    return QuantityDef(name, str(e.value), _unit(item, path, what, errors),
                       _text(item, "doc", path, what, errors),
                       _text(item, "source", path, what, errors), path, item.line, group,
                       _override(item, path, errors), e.line,
                       **display.read_fields(item, display.QUANTITY_FIELDS, path, what, errors))


def _read_constraints(block: Located | None, path: str, group: str,
                      errors: list[DlfError], kind: str = "constraint") -> list[ConstraintDef]:
    if block is None or block.value is None:
        return []
    if not isinstance(block.value, list):
        errors.append(ModelError(f"'{kind}s' must be a list of {{name, check, message}}", path,
                                 block.line))
        return []
    out = []
    for item in block.value:
        if not isinstance(item.value, dict):
            errors.append(ModelError("each constraint is a mapping with name, check, message",
                                     path, item.line))
            continue
        check_keys(item, CONSTRAINT_FIELDS, path, "a constraint", errors)
        name = _text(item, "name", path, "a constraint", errors)
        check = item.value.get("check")
        if check is None or not isinstance(check.value, str):
            errors.append(ModelError("a constraint needs a 'check' condition as text", path,
                                     item.line))
            continue
        out.append(ConstraintDef(name, check.value, _text(item, "message", path,
                                                          f"a {kind}", errors),
                                 path, check.line, group, kind))
    return out


def merge(all_defs: list[Definition], errors: list[DlfError],
          origin_of: dict[str, str] | None = None) -> tuple[
        dict[str, Definition], dict[str, list[Definition]]]:
    """Keep one definition per name; a redefinition needs `override: true` (or, replacing
    another plugin's replacement, `override: PLUGIN`). `origin_of`: file path -> plugin."""
    origin_of = origin_of or {}
    merged: dict[str, Definition] = {}
    overridden: dict[str, list[Definition]] = {}
    for d in all_defs:
        prev = merged.get(d.name)
        if prev is None:
            if d.override:  # a misspelt override would add a name and change nothing
                errors.append(ModelError(
                    f"'{d.name}' says 'override', but no definition loaded before it has that "
                    f"name{did_you_mean(d.name, list(merged))}; fix the name, or remove "
                    "'override' to define a new quantity", d.path, d.line))
            merged[d.name] = d
            continue
        if not d.override:
            errors.append(ModelError(
                f"'{d.name}' is already defined at {display_path(prev.path)}:{prev.line}; rename "
                "it, or add "
                "'override: true' to replace the earlier definition", d.path, d.line))
            continue
        problem = _override_problem(d, prev, overridden.get(d.name, []),
                                    origin_of.get(prev.path, "dlformula"))
        if problem:
            errors.append(ModelError(problem, d.path, d.line))
            continue
        overridden.setdefault(d.name, []).append(prev)
        merged[d.name] = display.inherit(d, prev)
    return merged, overridden


def _override_problem(d: Definition, prev: Definition, earlier: list[Definition],
                      prev_origin: str) -> str:
    """Why `d` may not replace `prev`, or ''. An override keeps the dimension (everything
    downstream was checked against it). A name already replaced is replaced again only by
    naming whose replacement goes (`override: PLUGIN`): otherwise the load order would decide,
    silently, which plugin's formula is dropped."""
    where = f"{display_path(prev.path)}:{prev.line}"
    named = d.override if isinstance(d.override, str) else None
    if earlier and named != prev_origin:
        return (f"'{d.name}' is already overridden at {where} by plugin '{prev_origin}' "
                f"(replacing {display_path(earlier[0].path)}:{earlier[0].line}); write "
                f"'override: {prev_origin}' to replace that replacement on purpose")
    if named is not None and named != prev_origin:
        return (f"'{d.name}' says 'override: {named}', but the definition it would replace "
                f"({where}) comes from '{prev_origin}'; write 'override: {prev_origin}' or "
                "'override: true'")
    try:
        old, new = parse_unit(prev.unit).dim, parse_unit(d.unit).dim
    except UnitSyntaxError:
        return ""  # the unit's own error is reported where it is read
    if old != new:
        return (f"'{d.name}' overrides {where} in {d.unit} ({format_dim(new)}), but the "
                f"definition it replaces is in {prev.unit} ({format_dim(old)}); an override "
                "keeps the dimension: convert the formula, or give it a new name")
    return ""


def load_formula_set(sources: list[Source]) -> FormulaSet:
    """Read, merge and check formula files; raise every problem at once.

    The steps: read every file; merge the definitions (overrides); parse the formulas and
    constraints (undefined names are reported before anything is built); find cycles; build
    each formula in sympy and check its dimension against its declared unit."""
    errors: list[DlfError] = []
    all_defs: list[Definition] = []
    constraints: list[ConstraintDef] = []
    groups = display.Groups()
    for src in sources:
        defs, checks = read_definitions(src, errors, groups)
        all_defs += defs
        constraints += checks
    merged, overridden = merge(all_defs, errors, {s.path: s.origin for s in sources})
    inputs = {n: d for n, d in merged.items() if isinstance(d, InputDef)}
    constants = {n: d for n, d in merged.items() if isinstance(d, ConstantDef)}
    quantities = {n: d for n, d in merged.items() if isinstance(d, QuantityDef)}
    _check_config_keys(inputs, errors)
    defined = set(merged)
    parsed = _parse_quantities(quantities, defined, errors)
    parsed_constraints = _parse_constraints(constraints, defined, errors)
    deps = {n: sorted(p.names & defined) for n, p in parsed.items()}
    g = _check_cycles(deps, merged, quantities, errors)
    # Keep going: each expression is built and unit-checked on its own (names carry declared
    # units), so every remaining problem is reported in this same pass.
    exprs, conditions = _build(merged, quantities, parsed, parsed_constraints, defined, errors)
    raise_all(errors)
    return FormulaSet(inputs, constants, quantities, [c for c, _ in parsed_constraints],
                      display.ranked(merged.values(), "summary"), exprs, conditions,
                      g.topological(list(quantities)), deps, overridden,
                      digest_sources(sources), list(sources), groups.ranks())


def _parse_quantities(quantities: dict[str, QuantityDef], defined: set[str],
                      errors: list[DlfError]) -> dict[str, exprmod.Parsed]:
    """Each formula through the whitelist, and the names it uses that nothing defines."""
    parsed: dict[str, exprmod.Parsed] = {}
    for name, q in quantities.items():
        try:
            parsed[name] = _parse(q.expr)
        except exprmod.ExprError as exc:
            errors.append(ModelError(f"quantity '{name}': {exc}", q.path, q.expr_line or q.line))
            continue
        for used in sorted(parsed[name].names - defined):
            errors.append(ModelError(
                f"quantity '{name}' uses '{used}', which nothing defines"
                f"{did_you_mean(used, defined)}; define it as an input or quantity",
                q.path, q.expr_line or q.line))
    return parsed


def _parse_constraints(constraints: list[ConstraintDef], defined: set[str],
                       errors: list[DlfError]) -> list[tuple[ConstraintDef, exprmod.Parsed]]:
    """The constraints whose conditions parse and use only defined names."""
    out: list[tuple[ConstraintDef, exprmod.Parsed]] = []
    for c in constraints:
        try:
            p = _parse(c.check)
        except exprmod.ExprError as exc:
            errors.append(ModelError(f"constraint '{c.name}': {exc}", c.path, c.line))
            continue
        missing = sorted(p.names - defined)
        for used in missing:
            errors.append(ModelError(f"constraint '{c.name}' uses '{used}', which nothing "
                                     f"defines{did_you_mean(used, defined)}", c.path, c.line))
        if not missing:
            out.append((c, p))
    return out


def _check_cycles(deps: dict[str, list[str]], merged: dict[str, Definition],
                  quantities: dict[str, QuantityDef], errors: list[DlfError]) -> Any:
    """The dependency graph; each circular definition is an error at its first quantity."""
    from . import graph as graphmod

    g = graphmod.Graph.from_deps(deps, names=list(merged))
    for cycle in g.cycles():
        first = quantities[cycle[0]]
        errors.append(ModelError(
            "circular definition: " + " --> ".join([*cycle, cycle[0]])
            + "; one of these must not depend on the others", first.path, first.line))
    return g


def _build(merged: dict[str, Definition], quantities: dict[str, QuantityDef],
           parsed: dict[str, exprmod.Parsed],
           parsed_constraints: list[tuple[ConstraintDef, exprmod.Parsed]], defined: set[str],
           errors: list[DlfError]) -> tuple[dict[str, Any], list[Any]]:
    """Sympy objects of the formulas and conditions, each formula's dimension checked against
    its declared unit."""
    import sympy

    symbols: dict[str, Any] = {}

    def symbol(name: str) -> Any:
        if name not in symbols:
            symbols[name] = sympy.Symbol(name)
        return symbols[name]

    env = {n: exprmod.NameInfo(parse_unit(d.unit).dim,
                               dict(d.choices) if isinstance(d, InputDef) and d.choices
                               else None)
           for n, d in merged.items()}
    builder = exprmod.Builder(env, symbol)
    exprs: dict[str, Any] = {}
    for name, q in quantities.items():
        if name not in parsed or not parsed[name].names <= defined:
            continue
        try:
            e, dim = _built(builder.build, parsed[name], env)
        except exprmod.ExprError as exc:
            errors.append(ModelError(f"quantity '{name}': {exc}", q.path, q.expr_line or q.line))
            continue
        declared = env[name].dim
        if dim != declared and not (e.is_Number and e == 0):  # a bare 0 fits any unit
            errors.append(ModelError(
                f"unit mismatch: quantity '{name}' is declared in {q.unit} "
                f"({format_dim(declared)}) but its formula gives {format_dim(dim)}; fix the "
                "formula or the unit", q.path, q.expr_line or q.line))
        exprs[name] = e
    conditions = []
    for c, p in parsed_constraints:
        try:
            conditions.append(_built(builder.build_condition, p, env))
        except exprmod.ExprError as exc:
            errors.append(ModelError(f"constraint '{c.name}': {exc}", c.path, c.line))
    return exprs, conditions


def _parse(text: Any) -> exprmod.Parsed:
    """exprmod.parse, once per process for a text and the functions known (a refused text is
    refused each time). The tree is only read after parsing."""
    return _parse_known(text, frozenset(exprmod.known_function_names()))


@lru_cache(maxsize=8192, typed=True)  # typed: True is refused, 1 is a number
def _parse_known(text: Any, known: frozenset[str]) -> exprmod.Parsed:
    return exprmod.parse(text)


# Formulas built in this process: a second Engine (another plugin set, a formula folder added,
# `check` of a file beside the built-in ones) rebuilds only what changed. Sympy objects are
# immutable, so sets share them. Key: the text, the dimension and choices of every name it uses,
# and the functions it calls (by identity: a plugin registering a function again builds anew).
_BUILT: dict[tuple[Any, ...], tuple[Any, tuple[Any, ...]]] = {}
_BUILT_LIMIT = 20_000


def _built(build: Any, parsed: exprmod.Parsed, env: dict[str, exprmod.NameInfo]) -> Any:
    """`build(parsed)`, or what it gave for the same text, names and functions before."""
    import ast

    calls = sorted({n.func.id for n in ast.walk(parsed.tree)
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)})
    table = exprmod.functions()
    specs = tuple(table.get(c) for c in calls)
    names = tuple((n, env[n].dim, tuple(sorted((env[n].choices or {}).items())))
                  for n in sorted(parsed.names))
    key = (build.__name__, parsed.text, names, tuple(calls), tuple(map(id, specs)))
    hit = _BUILT.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[1], specs)):
        return hit[0]
    value = build(parsed)  # an ExprError is raised, never kept
    if len(_BUILT) >= _BUILT_LIMIT:
        _BUILT.clear()
    _BUILT[key] = (value, specs)
    return value


def _check_config_keys(inputs: dict[str, InputDef], errors: list[DlfError]) -> None:
    seen: dict[str, InputDef] = {}
    for d in inputs.values():
        if not d.config:
            continue
        if d.config in seen:
            prev = seen[d.config]
            errors.append(ModelError(f"config key '{d.config}' already sets input "
                                     f"'{prev.name}' ({display_path(prev.path)}:{prev.line}); "
                                     "each key sets "
                                     "one input", d.path, d.line))
        seen[d.config] = d
