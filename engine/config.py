"""Config stage: a YAML config (+ --set overrides, preset, hardware node) -> input values.

Precedence, lowest first: an input's default, the hardware node's figures, the model preset,
the config file, `--set`. Every problem is reported at once with the file and line to fix:
unknown keys (did you mean), wrong types, values outside an input's domain, missing values, and
layouts that cannot run (the `constraints` of the formula files).
"""

from __future__ import annotations

import os
import re
from typing import Any, NamedTuple

from .defs import InputDef
from .errors import DlfError, UsageError, did_you_mean, display_path, raise_all
from .model import CompiledModel
from .resources import Catalog, Node, Preset, is_node_path
from .units import UnitSyntaxError, parse_unit
from .yamlfile import Located, read_user_yaml

SPECIAL_KEYS = {
    "model.preset": "a model preset id (dlformula presets)",
    "model.hf_config": "path to a Hugging Face config.json",
    "hardware.node": "a hardware node id (dlformula hardware)",
}


class Origin(NamedTuple):
    """Where an input's value came from, for messages and `explain`."""

    kind: str  # default | node | preset | config | set | hf_config | hf_config default
    path: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        if self.kind == "default":
            return "default"
        if self.kind == "set":
            return "--set"
        where = (f"{display_path(self.path)}:{self.line}" if self.line
                 else display_path(self.path))
        return f"{self.kind} {where}"


class Config:
    """Resolved inputs for one evaluation."""

    def __init__(self, path: str, values: dict[str, Any], labels: dict[str, Any],
                 origins: dict[str, Origin], node: Node | None = None,
                 preset: Preset | None = None, raw: dict[str, Any] | None = None) -> None:
        self.path = path
        self.values = values  # input name -> number the formulas see
        self.labels = labels  # input name -> value as written (choice labels, booleans)
        self.origins = origins
        self.node = node
        self.preset = preset
        self.raw = raw or {}  # dotted key -> plain value


def read_config_file(path: str) -> dict[str, Located]:
    """Flatten a config file into dotted keys with lines."""
    root = read_user_yaml(path, "config file", "give the path to a YAML config (see examples/)")
    dpath = display_path(path)
    if root.value is None or root.value == {}:
        raise UsageError("the config is empty; see examples/gpt3-175b.yaml for the sections",
                         dpath, 1)
    if not isinstance(root.value, dict):
        raise UsageError("a config is a mapping of sections (model, hardware, parallelism, "
                         "training)", dpath, root.line)
    flat: dict[str, Located] = {}
    errors: list[DlfError] = []
    for section, body in root.value.items():
        if not isinstance(body.value, dict):
            errors.append(UsageError(f"section '{section}' must be a mapping of keys, e.g. "
                                     f"{section}: {{key: value}}", dpath, body.line))
            continue
        for key, item in body.value.items():
            if isinstance(item.value, (dict, list)):
                errors.append(UsageError(f"'{section}.{key}' must be a single value", dpath,
                                         item.line))
                continue
            flat[f"{section}.{key}"] = item
    raise_all(errors)
    return flat


def resolve(model: CompiledModel, catalog: Catalog, path: str | None,
            sets: dict[str, Located] | None = None, check_layout: bool = True,
            hf_config: str | None = None, flat: dict[str, Located] | None = None) -> Config:
    """Turn a config file and overrides into the numbers every input takes. `flat`: the
    config file as `read_config_file` returns it, when the caller has it already.

    The layers, lowest first: defaults < node < preset (and a Hugging Face config) < config
    file < --set. Each step reports every error it finds before the next runs."""
    dpath = display_path(path) if path else "<no config>"
    if flat is None:
        flat = read_config_file(path) if path else {}
    sets = sets or {}
    by_key = {d.config: d for d in model.inputs.values() if d.config}
    raise_all(_unknown_keys(by_key, flat, sets, dpath))
    merged: dict[str, tuple[Located, Origin]] = {}
    for key, item in flat.items():
        merged[key] = (item, Origin("config", dpath, item.line))
    for key, item in sets.items():
        merged[key] = (item, Origin("set"))
    errors: list[DlfError] = []
    preset = _add_preset(catalog, merged, by_key, errors)
    _add_hf_config(hf_config, path, merged, by_key)
    node = _add_node(catalog, merged, by_key, errors)
    raise_all(errors)
    values, labels, origins = _input_values(model, merged, node, preset, dpath)
    config = Config(dpath, values, labels, origins, node, preset,
                    {k: v[0].value for k, v in merged.items()})
    if check_layout:
        check_constraints(model, config)
    return config


def _unknown_keys(by_key: dict[str, InputDef], flat: dict[str, Located],
                  sets: dict[str, Located], dpath: str) -> list[DlfError]:
    """Keys no loaded formula reads (checked first: they are the likeliest typo)."""
    known = set(by_key) | set(SPECIAL_KEYS)
    sections = {k.split(".")[0] for k in known}
    errors: list[DlfError] = []
    for origin_kind, mapping in (("config", flat), ("set", sets)):
        for key, item in mapping.items():
            if key in known:
                continue
            section = key.split(".")[0]
            if section not in sections:
                msg = (f"unknown section '{section}'{did_you_mean(section, sections)}; "
                       f"sections: {', '.join(sorted(sections))}")
            else:
                msg = (f"unknown key '{key}'{did_you_mean(key, known)}; `dlformula list` "
                       "shows every input and its config key")
            where = ("--set", None) if origin_kind == "set" else (dpath, item.line)
            errors.append(UsageError(msg, *where))
    return errors


def _add_preset(catalog: Catalog, merged: dict[str, tuple[Located, Origin]],
                by_key: dict[str, InputDef], errors: list[DlfError]) -> Preset | None:
    """The preset's values under what the config and --set give."""
    item = merged.get("model.preset")
    if item is None or item[0].value is None:
        return None
    o = item[1]
    preset = catalog.preset(str(item[0].value), (o.path if o.kind != "set" else "--set",
                                                 o.line))
    for key, value in preset.values.items():
        if key not in by_key:
            errors.append(UsageError(
                f"preset '{preset.id}' sets '{key}', which no loaded formula reads "
                "(is the plugin that defines it loaded?)", preset.path, value.line))
            continue
        if key not in merged:
            merged[key] = (value, Origin("preset", preset.path, value.line))
    return preset


def _add_hf_config(hf: str | None, path: str | None, merged: dict[str, tuple[Located, Origin]],
                   by_key: dict[str, InputDef]) -> None:
    """A Hugging Face config.json's model keys, over a preset's, under the config's own."""
    if hf is None and "model.hf_config" in merged and merged["model.hf_config"][0].value:
        hf = str(merged["model.hf_config"][0].value)
        if merged["model.hf_config"][1].kind == "config" and path and not os.path.isabs(hf):
            hf = os.path.join(os.path.dirname(path), hf)  # relative to the config file
    if not hf:
        return
    from .hfconfig import read_hf_config_notes

    hf_values, hf_notes = read_hf_config_notes(str(hf))
    for key, value in hf_values.items():
        if key in by_key and (key not in merged or merged[key][1].kind == "preset"):
            # a value the file leaves out, taken from the family's Hugging Face default
            kind = "hf_config default" if key in hf_notes else "hf_config"
            merged[key] = (Located(value, 0), Origin(kind, str(hf)))


def _add_node(catalog: Catalog, merged: dict[str, tuple[Located, Origin]],
              by_key: dict[str, InputDef], errors: list[DlfError]) -> Node | None:
    """The hardware node's specs, converted to the inputs' units, under everything else."""
    item = merged.get("hardware.node")
    if item is None or item[0].value is None:
        return None
    o = item[1]
    ref = str(item[0].value)
    if o.kind == "config" and o.path and is_node_path(ref) and not os.path.isabs(ref):
        ref = os.path.join(os.path.dirname(o.path), ref)  # relative to the config
    node = catalog.node(ref, (o.path if o.kind != "set" else "--set", o.line))
    for spec_key, spec in node.specs.items():
        key = f"hardware.{spec_key}"
        d = by_key.get(key)
        if d is None:
            errors.append(UsageError(
                f"hardware node '{node.id}' gives '{spec_key}', which no loaded formula "
                f"reads{did_you_mean(key, by_key)}", node.path, spec.line))
            continue
        if key not in merged:
            try:
                value = _convert(spec.value, spec.unit, d.unit)
            except ValueError as exc:
                errors.append(UsageError(f"spec '{spec_key}': {exc}", node.path, spec.line))
                continue
            merged[key] = (Located(value, spec.line), Origin("node", node.path, spec.line))
    return node


def _input_values(model: CompiledModel, merged: dict[str, tuple[Located, Origin]],
                  node: Node | None, preset: Preset | None, dpath: str
                  ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Origin]]:
    """Every input's value (codes for choices), label and origin; defaults fill the rest."""
    values: dict[str, Any] = {}
    labels: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    missing: list[str] = []
    errors: list[DlfError] = []
    for name, d in model.inputs.items():
        entry = merged.get(d.config) if d.config else None
        if entry is None:
            if d.default is None:
                missing.append(name)
                continue
            raw, origin = d.default, Origin("default")
        else:
            raw, origin = entry[0].value, entry[1]
        value, problem = convert_input(d, raw)
        if problem:
            errors.append(input_error(d, raw, problem, origin))
            continue
        values[name] = d.code(value)
        labels[name] = value
        origins[name] = origin
    if missing:
        errors += _missing_errors([model.inputs[n].config for n in missing], node, preset, dpath)
    raise_all(errors)
    return values, labels, origins


def convert_input(d: InputDef, raw: Any) -> tuple[Any, str | None]:
    """A value given for input `d` (a number, a choice label, true/false, text such as
    '80 GiB') -> (the value in the input's unit or its label, why it is refused or None)."""
    value = raw
    if isinstance(raw, str) and not d.choices and d.domain.kind != "boolean":
        value = _parse_quantity_text(raw, d.unit)
    if value is None:
        return value, "is missing a value"
    return value, d.domain.problem(value, tuple(c for c, _ in d.choices))


def input_error(d: InputDef, raw: Any, problem: str, origin: Origin) -> UsageError:
    shown = repr(raw) if isinstance(raw, str) else raw
    return UsageError(f"{d.config} = {shown}: {problem}" + (
        f" ({d.doc.rstrip('.')})" if d.doc else ""), origin.path if origin.kind != "set"
        else "--set", origin.line)


def _missing_errors(keys: list[str], node: Node | None, preset: Preset | None,
                    path: str) -> list[DlfError]:
    """Missing values, grouped the way a user fixes them: a node, a model, the rest."""
    out: list[DlfError] = []
    rest = list(keys)
    hardware = [k for k in keys if k.startswith("hardware.") and k != "hardware.gpus"]
    if hardware and node is None:
        out.append(UsageError("no hardware node: set hardware.node (`dlformula hardware` lists "
                              "them)", path))
        rest = [k for k in rest if k not in hardware]
    model_keys = [k for k in keys if k.startswith("model.")]
    if model_keys and preset is None:
        out.append(UsageError("no model: set model.preset (`dlformula presets` lists them) or "
                              "the fields " + ", ".join(model_keys), path))
        rest = [k for k in rest if k not in model_keys]
    if rest:
        out.append(UsageError(f"missing values for {', '.join(rest)}; set them in the config",
                              path))
    return out


def check_constraints(model: CompiledModel, config: Config) -> None:
    """Report every constraint the config breaks, at the line of a key it involves."""
    results = model.check(config.values)
    errors: list[DlfError] = []
    shown: dict[str, Any] | None = None
    for ok, c, names in zip(results, model.constraints, model.constraint_names):
        if ok:
            continue
        if shown is None:
            shown = _message_values(model, config.values)
        message = fill_message(c.message, shown, model)
        path, line = _blame(names, config, model)
        errors.append(UsageError(message, path, line))
    raise_all(errors)


def _message_values(model: CompiledModel, values: dict[str, Any]) -> dict[str, Any]:
    """Inputs and, where they can be computed, quantities, to fill constraint messages."""
    try:
        return model.evaluate(values)
    except Exception:
        return dict(values)


def _blame(names: list[str], config: Config, model: CompiledModel) -> tuple[str, int | None]:
    """The config line to point at: the latest-written key among the constraint's inputs."""
    best: tuple[str, int | None] | None = None
    for n in names:
        o = config.origins.get(n)
        if o is None or o.kind not in ("config", "set"):
            continue
        if o.kind == "set":
            return "--set", None
        if best is None or (o.line or 0) > (best[1] or 0):
            best = (o.path or config.path, o.line)
    return best or (config.path, None)


def fill_message(message: str, values: dict[str, Any], model: CompiledModel) -> str:
    """`{name}` placeholders filled with values (see CompiledModel.fill_message)."""
    return model.fill_message(message, values)


def _convert(value: float, from_unit: str, to_unit: str) -> float:
    try:
        a, b = parse_unit(from_unit), parse_unit(to_unit)
    except UnitSyntaxError as exc:
        raise ValueError(str(exc)) from None
    if a.dim != b.dim:
        raise ValueError(f"unit {from_unit} cannot be converted to {to_unit}")
    if a.scale == b.scale:
        return value
    return value * a.scale / b.scale


_QTY = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")


def _parse_quantity_text(text: str, unit: str) -> Any:
    """'80 GiB' -> number in `unit`; anything unreadable is returned as is (and then refused)."""
    m = _QTY.match(text)
    if not m:
        return text
    number = float(m.group(1))
    if not m.group(2):
        return number
    try:
        return _convert(number, m.group(2), unit)
    except ValueError:
        return text
