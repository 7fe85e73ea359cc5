"""Where data comes from: built-in formula files, hardware node types and model presets.

Everything is read through importlib.resources, so it works the same from a wheel, an editable
install or a source checkout. Plugins add further folders of the same three kinds.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

from .errors import DlfError, ModelError, UsageError, did_you_mean, display_path, raise_all
from .sources import Source
from .units import UnitSyntaxError, parse_unit
from .yamlfile import Located, check_keys, read_file_text, read_yaml_file


class DataFolder(NamedTuple):
    """A folder of YAML files contributed by the core or a plugin."""

    kind: str  # formulas | hardware | presets
    path: Any  # a Traversable or a filesystem path
    origin: str = "dlformula"

    def files(self) -> list[Any]:
        try:
            entries = list(self.path.iterdir())
        except (OSError, AttributeError) as exc:
            raise ModelError(f"cannot read {self.kind} folder {display_path(self.path)} of "
                             f"{self.origin}: {exc}") from None
        return sorted((e for e in entries if e.name.endswith(".yaml")), key=lambda e: e.name)


def builtin_folders() -> list[DataFolder]:
    from .diskpath import package_folder

    return [DataFolder(kind, package_folder(f"dlformula.{kind}"))
            for kind in ("formulas", "hardware", "presets")]


def formula_sources(folders: list[DataFolder]) -> list[Source]:
    out = []
    for folder in folders:
        if folder.kind != "formulas":
            continue
        for f in folder.files():
            out.append(Source(_abspath(f), read_file_text(f, "formula file"), folder.origin))
    return out


class Spec(NamedTuple):
    value: float  # in the unit it is written in
    unit: str
    source: str
    line: int


class Node(NamedTuple):
    """A hardware node type: one accelerator's figures and what surrounds it."""

    id: str
    name: str
    vendor: str
    notes: str
    specs: dict[str, Spec]
    path: str
    origin: str = "dlformula"
    derived_from: str = ""  # the node a calibrated file was fitted from (its error band's family)
    calibration_errors: tuple[float, ...] = ()  # its runs' left-out relative step-time errors


class Preset(NamedTuple):
    id: str
    name: str
    source: str
    values: dict[str, Located]  # dotted config key -> value with its line
    published: dict[str, float]
    path: str
    origin: str = "dlformula"


NODE_FIELDS = {"name": "display name", "vendor": "maker", "notes": "remarks", "specs": "figures",
               "override": "true when replacing a node of the same id (a plugin's)",
               "derived_from": "the node id a calibrated file was fitted from (calibrate)",
               "calibration": "the calibration's runs and their left-out errors"}
SPEC_FIELDS = {"value": "number", "unit": "unit text", "source": "where the figure comes from",
               "from": "a node id whose figure of the same key this one takes, instead of a value"}

# (node id, key, path, line) -> (value, unit) of the figure a spec borrows (`from:`)
Borrow = Callable[[str, str, str, int], tuple[float, str]]
PRESET_FIELDS = {"name": "display name", "source": "where the figures come from",
                 "published_params": "published total parameters",
                 "published_active_params": "published active parameters",
                 "model": "model fields", "moe": "MoE fields", "mla": "latent attention fields",
                 "override": "true when replacing a preset of the same id (a plugin's)"}


class Catalog:
    """Hardware nodes and presets from all folders, indexed by id (files read on demand)."""

    def __init__(self, folders: list[DataFolder]) -> None:
        self.folders = folders
        self._files: dict[str, dict[str, tuple[Any, str]]] = {"hardware": {}, "presets": {}}
        # kind -> id -> (origin, path) of the node or preset a later folder's file replaced
        self.replaced: dict[str, dict[str, tuple[str, str]]] = {"hardware": {}, "presets": {}}
        errors: list[DlfError] = []
        for folder in folders:
            if folder.kind in self._files:
                table = self._files[folder.kind]
                for f in folder.files():
                    ident = f.name[:-5]
                    previous = table.get(ident)
                    if previous is not None:
                        what = "hardware node" if folder.kind == "hardware" else "preset"
                        if not _declares_override(f, what):
                            errors.append(ModelError(
                                f"{what} '{ident}' of {folder.origin} replaces the one of "
                                f"{previous[1]} ({display_path(_abspath(previous[0]))}); add "
                                "'override: true' to this file if that is meant, or rename "
                                "it", _abspath(f), 1))
                            continue
                        self.replaced[folder.kind][ident] = (previous[1],
                                                             _abspath(previous[0]))
                    table[ident] = (f, folder.origin)
        raise_all(errors)

    def node_ids(self) -> list[str]:
        return sorted(self._files["hardware"])

    def preset_ids(self) -> list[str]:
        return sorted(self._files["presets"])

    def node(self, node_id: str, where: tuple[str | None, int | None] = (None, None)) -> Node:
        if is_node_path(node_id):  # a node file of one's own (dlformula calibrate writes one)
            import pathlib

            if not os.path.isfile(node_id):
                raise UsageError(f"hardware node file '{node_id}' does not exist; give the path "
                                 "of a node YAML (dlformula calibrate -o writes one) or a node "
                                 "id (`dlformula hardware` lists them)", *where)
            return read_node(os.path.basename(node_id).rsplit(".", 1)[0],
                             pathlib.Path(node_id), "file", self._borrow([node_id]))
        entry = self._files["hardware"].get(node_id)
        if entry is None:
            raise UsageError(f"unknown hardware node '{node_id}'"
                             f"{did_you_mean(node_id, self._files['hardware'])}; "
                             "`dlformula hardware` lists them", *where)
        return read_node(node_id, *entry, self._borrow([node_id]))

    def _borrow(self, chain: list[str]) -> Borrow:
        """How a node file read through `chain` (node ids) resolves `from: NODE` specs; each
        node it borrows from is read once, however many of its figures are borrowed."""
        read: dict[str, Node] = {}

        def borrow(target: str, key: str, path: str, line: int) -> tuple[float, str]:
            if target in chain:
                raise ModelError(f"spec '{key}' borrows from '{target}', which borrows it back "
                                 f"({' -> '.join([*chain, target])}); give one of them a value",
                                 path, line)
            entry = self._files["hardware"].get(target)
            if entry is None:
                raise ModelError(f"spec '{key}' borrows from unknown node '{target}'"
                                 f"{did_you_mean(target, self._files['hardware'])}; "
                                 "`dlformula hardware` lists them", path, line)
            if target not in read:
                read[target] = read_node(target, *entry, self._borrow([*chain, target]))
            spec = read[target].specs.get(key)
            if spec is None:
                raise ModelError(f"spec '{key}' borrows from '{target}', which has no '{key}'; "
                                 "give a value instead", path, line)
            return spec.value, spec.unit
        return borrow

    def preset(self, preset_id: str, where: tuple[str | None, int | None] = (None, None)) -> Preset:
        entry = self._files["presets"].get(preset_id)
        if entry is None:
            raise UsageError(f"unknown model preset '{preset_id}'"
                             f"{did_you_mean(preset_id, self._files['presets'])}; "
                             "`dlformula presets` lists them", *where)
        return read_preset(preset_id, *entry)


def _declares_override(f: Any, what: str) -> bool:
    """Whether a node or preset file says `override: true` at its top level."""
    root = read_yaml_file(f, f"{what} file", shown=_abspath(f))
    if not isinstance(root.value, dict):
        return False
    item = root.value.get("override")
    if item is not None and not isinstance(item.value, bool):
        raise ModelError("'override' must be true or false", _abspath(f), item.line)
    return item is not None and item.value is True


def _abspath(f: Any) -> str:
    """A data file's absolute path (kept absolute so cached definitions do not depend on the
    directory they were built from; messages shorten it with display_path)."""
    import os

    return os.path.abspath(str(f))


def is_node_path(node_id: str) -> bool:
    """A hardware.node value naming a file rather than a node id."""
    return node_id.endswith((".yaml", ".yml")) or "/" in node_id or os.sep in node_id


def read_node(node_id: str, f: Any, origin: str, borrow: Borrow | None = None) -> Node:
    """A node file's figures; a spec written `{from: NODE, source}` takes NODE's figure of the
    same key through `borrow` (one value for a hardware family, kept in one file)."""
    path = _abspath(f)
    root = read_yaml_file(f, "hardware file", shown=path)
    errors: list[DlfError] = []
    if not isinstance(root.value, dict):
        raise ModelError("a hardware file is a mapping with name, vendor, specs", path, root.line)
    check_keys(root, NODE_FIELDS, path, "the hardware file", errors)
    specs: dict[str, Spec] = {}
    block = root.value.get("specs")
    if block is None or not isinstance(block.value, dict):
        errors.append(ModelError("a hardware file needs a 'specs' mapping", path, root.line))
    else:
        for key, item in block.value.items():
            if not isinstance(item.value, dict):
                errors.append(ModelError(f"spec '{key}' must be {{value, unit, source}}", path,
                                         item.line))
                continue
            check_keys(item, SPEC_FIELDS, path, f"spec '{key}'", errors)
            v, u, s, frm = (item.value.get(k) for k in ("value", "unit", "source", "from"))
            if frm is None and (v is None or isinstance(v.value, bool)
                                or not isinstance(v.value, (int, float))):
                errors.append(ModelError(f"spec '{key}' needs a numeric value", path, item.line))
                continue
            if s is None or not isinstance(s.value, str) or not s.value.strip():
                errors.append(ModelError(f"spec '{key}' needs a source: every hardware figure "
                                         "says where it comes from", path, item.line))
                continue
            if frm is not None:
                if v is not None:
                    errors.append(ModelError(f"spec '{key}' takes either a value or 'from: "
                                             "NODE' (a node id), not both", path, frm.line))
                    continue
                if not isinstance(frm.value, str) or borrow is None:
                    errors.append(ModelError(f"spec '{key}': 'from' is a node id such as "
                                             "h100-sxm (`dlformula hardware` lists them)",
                                             path, frm.line))
                    continue
                try:
                    value, theirs = borrow(frm.value, key, path, frm.line)
                except DlfError as exc:
                    errors.append(exc)
                    continue
                if u is not None and str(u.value) != theirs:
                    errors.append(ModelError(f"spec '{key}' is in '{u.value}' but '{frm.value}' "
                                             f"gives it in '{theirs}'; drop the unit", path,
                                             u.line))
                    continue
                specs[key] = Spec(value, theirs, s.value, item.line)
                continue
            assert v is not None
            unit = "1" if u is None else str(u.value)
            try:
                parse_unit(unit)
            except UnitSyntaxError as exc:
                errors.append(ModelError(f"spec '{key}': {exc}", path, item.line))
                continue
            specs[key] = Spec(v.value, unit, s.value, item.line)
    derived, cal_errors = _calibration_fields(root, path, errors)
    raise_all(errors)
    text = {k: str(root.value[k].value) if k in root.value else ""
            for k in ("name", "vendor", "notes")}
    return Node(node_id, text["name"] or node_id, text["vendor"], text["notes"], specs, path,
                origin, derived, cal_errors)


def _calibration_fields(root: Located, path: str, errors: list[DlfError]
                        ) -> tuple[str, tuple[float, ...]]:
    """`derived_from: NODE` and `calibration: {left_out_errors: [...]}`, written by calibrate."""
    derived = root.value.get("derived_from")
    if derived is not None and not (isinstance(derived.value, str) and derived.value.strip()):
        errors.append(ModelError("derived_from names the node id a calibrated file came from",
                                 path, derived.line))
        derived = None
    block = root.value.get("calibration")
    if block is None:
        return (str(derived.value) if derived else "", ())
    plain = block.plain()
    found = plain.get("left_out_errors") if isinstance(plain, dict) else None
    if not (isinstance(found, list) and all(
            isinstance(e, (int, float)) and not isinstance(e, bool) for e in found)):
        errors.append(ModelError("calibration needs left_out_errors: a list of numbers (each "
                                 "run's left-out relative error); rerun dlformula calibrate",
                                 path, block.line))
        found = []
    return (str(derived.value) if derived else "", tuple(float(e) for e in found))


def read_preset(preset_id: str, f: Any, origin: str) -> Preset:
    path = _abspath(f)
    root = read_yaml_file(f, "preset file", shown=path)
    errors: list[DlfError] = []
    if not isinstance(root.value, dict):
        raise ModelError("a preset file is a mapping with name, source, model", path, root.line)
    check_keys(root, PRESET_FIELDS, path, "the preset file", errors)
    values: dict[str, Located] = {}
    for section in ("model", "moe", "mla"):
        block = root.value.get(section)
        if block is None:
            continue
        if not isinstance(block.value, dict):
            errors.append(ModelError(f"'{section}' must be a mapping", path, block.line))
            continue
        for key, item in block.value.items():
            v = item.value
            if isinstance(v, dict):  # {value: X, source: "..."}
                inner = v.get("value")
                if inner is None:
                    errors.append(ModelError(f"'{section}.{key}' needs a value", path, item.line))
                    continue
                v = inner.value
            if v is None or isinstance(v, (dict, list)):
                errors.append(ModelError(f"'{section}.{key}' must be a number, word or "
                                         "true/false", path, item.line))
                continue
            values[f"{section}.{key}"] = Located(v, item.line)
    published = {}
    for key in ("published_params", "published_active_params"):
        item = root.value.get(key)
        if item is not None:
            inner = item.value.get("value") if isinstance(item.value, dict) else item
            v = inner.value if inner is not None else None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not _finite(v) \
                    or v < 0:
                errors.append(ModelError(f"'{key}' must be a number of parameters (>= 0)",
                                         path, item.line))
                continue
            published[key[len("published_"):]] = float(v)
    raise_all(errors)
    name = str(root.value["name"].value) if "name" in root.value else preset_id
    source = str(root.value["source"].value) if "source" in root.value else ""
    return Preset(preset_id, name, source, values, published, path, origin)


def _finite(v: float) -> bool:
    import math

    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def extra_sources(base: list[Source], paths: list[str]) -> list[Source]:
    """`base` plus the YAML files at `paths` (files or folders); a given file replaces the
    installed file at the same location, so `dlformula check formulas/memory.yaml` works."""
    from pathlib import Path

    files: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files += sorted(path.glob("*.yaml"))
        else:
            files.append(path)
    given = {f.resolve() for f in files}
    out = [s for s in base if Path(s.path).resolve() not in given]
    for f in files:
        text = read_file_text(str(f), "formula file", UsageError)
        out.append(Source(_abspath(f), text, "check"))
    return out
