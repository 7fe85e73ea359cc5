"""The mapping: one run of a runs file -> the config it becomes, with every default it picked.

`map_row` reads what a run states, in the spellings sources use (runsfile.py reads them into
one), and the conventions of conventions.yaml where it is silent: the framework's documented
defaults, a published recipe's value for a knob the run leaves out, else the best feasible
value `dlformula search` finds for the stated layout (layout.py). Settings a framework ignores
(vpp without pipeline parallelism, expert parallelism on a dense model) are dropped with a
note. A run is skipped (`Skip`) only when its accelerator has no node or the model cannot
express it (4-bit training, MoE without the moe plugin); a run that cannot be read raises
`Invalid` after reporting each problem with its line.

Nothing here is tuned per run: the mapping never reads a run's `measured`, `derived` or
`target` figures.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import cached_property
from typing import Any, NamedTuple

from ..errors import UsageError
from .conventions import RESERVED_KEYS, Conventions, conventions, first_match, holds, published
from .runsfile import Row, as_flag

# A whole number as a GPU's name prints it, thousands separated or not ("1,100 W", "1100 W",
# "288 GB"), not the tail of a longer one ("1,100" is not 100) nor of a decimal ("1.5").
_NUMBER = r"(?<![\d.,])(\d{1,3}(?:,\d{3})+|\d+)(?![\d.,]\d)"


def _number(m: re.Match[str]) -> float:
    return float(m.group(1).replace(",", ""))


class Skip(Exception):
    """A run the model cannot express; the message says why."""


class Invalid(Exception):
    """A run that cannot be read; its problems are in the row's errors."""


class Mapped(NamedTuple):
    values: dict[str, Any]  # config key -> typed value, in the order set
    assumptions: list[str]

    @property
    def sets(self) -> list[str]:
        """The config as `--set KEY=VALUE` items."""
        return [f"{k}={_fmt(v)}" for k, v in self.values.items()]


class Context(NamedTuple):
    """What the mapping needs from the loaded model and data."""

    inputs: dict[str, Any]  # config key -> InputDef (plugins add keys)
    node_ids: list[str]
    node_hbm: dict[str, tuple[float, str]]  # node -> HBM capacity (value, unit)
    best: Callable[[dict[str, Any], list[str]], dict[str, Any] | None] | None = None
    conv: Conventions | None = None
    node_gpus: dict[str, int] | None = None  # node -> accelerators per server
    node_vendor: dict[str, str] | None = None  # node -> its maker, as its hardware file says


# Fields read explicitly below; any other field of these sections passes through when a loaded
# formula reads it, and is otherwise listed as ignored.
MODEL_FIELDS = {"layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len",
                "params_billion", "arch", "head_dim", "glu", "norm", "tied_embeddings",
                "linear_bias", "position_embedding", "name"}
PARALLEL_FIELDS = {"tp", "pp", "dp", "cp", "ep", "etp", "vpp", "sp", "zero", "fsdp",
                   "recompute", "pp_schedule"}
HARDWARE_FIELDS = {"gpu", "node", "count", "gpus_per_node", "interconnect", "nodes"}
MOE_FIELDS = ("experts", "top_k", "expert_ffn_hidden", "shared_experts", "first_dense_layers",
              "moe_every", "capacity_factor", "max_nodes_per_token")
MOE_READ = {"shared_expert_ffn_hidden"}  # read by Mapper._shared_width
PRECISION_FLAGS = ("fp8", "fp8_format", "fp16", "bf16")  # read by Mapper._precision_flags
PASS_THROUGH = {"model": ("model", "mla", "moe"), "mla": ("mla",), "moe": ("moe",),
                "parallel": ("parallelism",), "training": ("training",),
                "hardware": ("hardware",)}


# Fields with a type, read once up front so that every malformed one is reported together.
INTEGERS = {**{f"model.{k}": 1 for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden",
                                         "vocab", "seq_len", "head_dim")},
            **{f"parallel.{k}": 1 for k in ("tp", "pp", "dp", "cp", "ep", "etp")},
            "parallel.zero": 0, "hardware.count": 1, "hardware.gpus_per_node": 1,
            "hardware.nodes": 1,
            **{f"batch.{k}": 1 for k in ("global_batch", "micro_batch", "local_batch",
                                         "global_batch_tokens", "grad_accum")},
            **{f"moe.{k}": 0 for k in ("experts", "top_k", "expert_ffn_hidden",
                                       "shared_experts", "first_dense_layers",
                                       "max_nodes_per_token")},
            "moe.moe_every": 1}
FLAGS = ("model.glu", "model.linear_bias", "model.tied_embeddings", "parallel.sp")


def check_types(row: Row) -> bool:
    """Read every typed field once; False when the run has a malformed field (each reported
    at its line)."""
    for key, minimum in INTEGERS.items():
        row.integer(key, minimum)
    for key in FLAGS:
        row.flag(key)
    return row.problems == 0


# A mean document length in words ("mean document length of 2,048 tokens", "average doc
# length 8K"), and a document mask named without one (Llama 3's "attention mask that prevents
# self-attention between different documents").
DOC_LENGTH = re.compile(r"(?:mean|average|avg)\.?\s+(?:document|doc)s?\s+length\s*"
                        r"(?:of|=|:|is|~|≈)?\s*([0-9][0-9,.]*)\s*([kK]\b)?", re.I)
DOC_MASK = re.compile(r"document[- _]?mask|doc[- _]mask|intra[- ]document|cross[- ]document|"
                      r"(?:attention|mask)\w*\s+between\s+(?:different\s+)?documents", re.I)


def map_row(row: Row, ctx: Context) -> Mapped:
    """The config one run becomes. Raises Skip or Invalid (see the module docstring)."""
    from .layout import batch, knobs, layout

    m = Mapper(row, ctx)
    if not check_types(row):
        raise Invalid(row.id)
    m.model()
    m.hardware()
    layout(m)
    m.moe()
    m.training()
    batch(m)
    m.frameworks()
    m.pass_through()
    if row.problems:
        raise Invalid(row.id)
    knobs(m)
    notes = list(dict.fromkeys(row.readings + m.notes))
    return Mapped(dict(m.sets), notes)


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


class Mapper:
    """Builds one run's config (`sets`) and the defaults it picked (`notes`)."""

    def __init__(self, row: Row, ctx: Context) -> None:
        self.row = row
        self.ctx = ctx
        self.conv = ctx.conv or conventions()
        self.known = set(ctx.inputs)
        self.sets: dict[str, Any] = {}
        self.notes: list[str] = []
        self.unknown: dict[str, str] = {}  # knobs the run leaves out -> why they matter
        self.arch = (row.text("model.arch") or "").lower()
        texts = {"id": row.text("id") or "", "source": row.text("source") or "",
                 "notes": row.text("notes") or "",
                 "arch": row.text("model.arch") or "",
                 "schedule": row.text("parallel.pp_schedule") or "",
                 "precision": row.text("precision") or "",
                 "routing": row.text("routing") or ""}
        texts["texts"] = " ".join(texts.values())
        texts["recipe"] = "\n".join(f"{key}: {item.plain()}" for key, item in
                                     row.section("framework").items()
                                     if not isinstance(item.plain(), (dict, list)))
        texts["vendor"] = ""  # set with the node (hardware)
        self.texts = texts

    def set_known(self, key: str, value: Any, note: str | None = None) -> None:
        """Set `key` if a loaded formula reads it (plugins add keys)."""
        if key in self.known:
            self.sets[key] = value
            if note:
                self.notes.append(note)

    def invalid(self, message: str, line: int | None = None) -> None:
        self.row.errors.append(UsageError(f"run '{self.row.id}': {message}", self.row.path,
                                          line or self.row.line))
        raise Invalid(self.row.id)

    # -- model -----------------------------------------------------------------------------------
    def model(self) -> None:
        row, sets = self.row, self.sets
        required = ("layers", "hidden", "heads", "vocab", "seq_len")
        missing = [f"model.{k}" for k in required if row.get(f"model.{k}") is None]
        if missing:
            them = "them" if len(missing) > 1 else "it"
            self.invalid(f"gives no {', '.join(missing)}; add {them} (the model shape and "
                         "sequence length are needed to predict it)")
        for key in required[:4]:
            sets[f"model.{key}"] = row.integer(f"model.{key}", 1)
        sets["training.seq_len"] = row.integer("model.seq_len", 1)
        if None in sets.values():
            raise Invalid(row.id)  # reported with their lines
        sets["model.kv_heads"] = row.integer("model.kv_heads", 1) or sets["model.heads"]
        ffn = row.integer("model.ffn_hidden", 1)
        if ffn is None:
            ffn = 4 * sets["model.hidden"]
            self.notes.append("ffn_hidden not given: 4 x hidden")
        sets["model.ffn_hidden"] = ffn
        if row.get("model.head_dim") is not None:
            sets["model.head_dim"] = row.integer("model.head_dim", 1)
        self._shape_from_arch(ffn)

    def _shape_from_arch(self, ffn: int) -> None:
        """GLU, norm, biases, positions and tying: as stated, else from the architecture text
        (GPT-style GeLU models: LayerNorm, biases, learned positions, tied embeddings)."""
        row, sets, arch = self.row, self.sets, self.arch
        hidden = sets["model.hidden"]
        glu = row.flag("model.glu")
        if glu is None:
            if re.search(r"non[- ]?(?:gated|glu)|ungated|without (?:a )?gat|no glu", arch):
                glu = False  # "GeLU non-gated" names "gated" too: read the negation first
            elif re.search(r"swiglu|geglu|reglu|\bglu\b|llama|mixtral|\bgated", arch):
                glu = True
            elif re.search(r"gelu|relu", arch):
                glu = False
            else:
                glu = ffn != 4 * hidden
                self.notes.append(f"MLP {'gated (SwiGLU)' if glu else 'GeLU'}: inferred from "
                                  f"ffn_hidden = {ffn / hidden:g} x hidden")
        sets["model.glu"] = glu
        gpt_style = not glu
        norm = row.text("model.norm") or (
            "layernorm" if "layernorm" in arch else "rmsnorm" if "rmsnorm" in arch
            else "layernorm" if gpt_style else "rmsnorm")
        sets["model.norm"] = norm.lower()
        bias = row.flag("model.linear_bias")
        sets["model.linear_bias"] = ("no bias" not in arch and gpt_style) if bias is None \
            else bias
        pos = row.text("model.position_embedding") or (
            "rope" if re.search(r"rope|rotary|alibi", arch) else
            "learned" if "learned" in arch or gpt_style else "rope")
        sets["model.position_embedding"] = pos.lower()
        tied = row.flag("model.tied_embeddings")
        sets["model.tied_embeddings"] = (
            "untied" not in arch and ("tied" in arch or gpt_style)) if tied is None else tied

    # -- hardware --------------------------------------------------------------------------------
    def hardware(self) -> None:
        row, sets, ctx = self.row, self.sets, self.ctx
        gpu = row.text("hardware.gpu") or ""
        node = row.text("hardware.node")
        if node is not None and node not in ctx.node_ids:
            item = row.get("hardware.node")
            self.invalid(f"hardware.node '{node}' is not a known node; give one of "
                         f"`dlformula hardware` (or hardware.gpu: its name)",
                         item.line if item else None)
        if node is None:
            if not gpu:
                self.invalid("gives no accelerator; add hardware.gpu (its name, e.g. H100 "
                             "SXM) or hardware.node (`dlformula hardware` lists them)")
            found = first_match(self.conv.accelerators, gpu)
            item = row.get("hardware.gpu")
            if found is None:
                self.invalid(f"accelerator '{gpu}' is not one dlformula knows; give "
                             "hardware.node (`dlformula hardware` lists them)",
                             item.line if item else None)
            node = str(found.value) if found else ""
            if node not in ctx.node_ids:
                raise Skip(f"no hardware node for '{gpu}' (it would be {node}; "
                           "`dlformula hardware` lists the nodes)")
        sets["hardware.node"] = node
        self.texts["vendor"] = (ctx.node_vendor or {}).get(node, "")
        self._hardware_from_name(gpu, node, row.text("hardware.interconnect") or "")
        if row.get("hardware.gpus_per_node") is not None:
            sets["hardware.gpus_per_node"] = row.integer("hardware.gpus_per_node", 1)

    def _hardware_from_name(self, gpu: str, node: str, interconnect: str) -> None:
        """HBM capacity and power limit printed in the name; known variants of a node, found
        in the name or the interconnect the run describes (a cloud's network on the board)."""
        m = re.search(rf"{_NUMBER}\s*GB\b", gpu, re.IGNORECASE)
        spec = self.ctx.node_hbm.get(node)
        if m and spec and spec[1] in ("GiB", "GB") and _number(m) != spec[0]:
            self.sets["hardware.hbm_capacity"] = f"{_number(m):g} GiB"
            self.notes.append(f"{node} with {_number(m):g} GB of HBM (capacity from the GPU "
                              "name)")
        for variant in self.conv.variants:
            if variant.node == node and variant.regex.search(f"{gpu}\n{interconnect}"):
                self.sets.update({k: v for k, v in variant.sets.items() if k in self.known})
                self.notes.append(variant.note)
        m = re.search(rf"{_NUMBER}\s*W\b", gpu)
        if m:
            self.set_known("hardware.tdp", f"{_number(m):g} W",
                           f"power limit {_number(m):g} W: hardware.tdp")

    def _recompute_modules(self, written: str) -> None:
        """Megatron-Core's recompute_modules the run lists that the formulas price on their
        own (the MLA up-projections, the experts' activation function, the whole MoE layer),
        read after the words recompute_modules."""
        at = written.find("recompute_modules")
        if at < 0:
            return
        for module in ("mla_up_proj", "moe_act", "moe"):
            if re.search(rf"\b{module}\b", written[at:]):
                self.set_known(f"training.recompute_{module}", True)

    # -- mixture of experts ----------------------------------------------------------------------
    def moe(self) -> None:
        """MoE fields map to the moe plugin's keys; without the plugin the run is skipped.
        Expert parallelism on a dense model is ignored (frameworks ignore it)."""
        row = self.row
        values = {f"moe.{k}": row.number(f"moe.{k}") for k in MOE_FIELDS
                  if row.get(f"moe.{k}") is not None}
        ep = row.integer("parallel.ep", 1)
        experts = values.get("moe.experts") or 0
        if experts <= 1 and not re.search(r"\bmoe\b|mixture.of.experts", self.arch):
            if ep is not None:
                self.notes.append(f"ep = {ep} ignored: a dense model has no experts to "
                                  "spread")
            if row.get("parallel.etp") is not None and (row.integer("parallel.etp", 1) or 1) > 1:
                self.notes.append("etp ignored: a dense model has no experts")
            return
        if "moe.experts" not in self.known:
            raise Skip("MoE needs the moe plugin")
        if experts <= 1:
            self.invalid("is a mixture-of-experts model (model.arch) but gives no number of "
                         "experts; add model.experts (or moe.experts)")
        for key, value in values.items():
            if value is None:
                continue
            if key in self.known:
                self.sets[key] = int(value) if value == int(value) else value
            else:
                self.notes.append(f"{key} ignored (the loaded MoE formulas do not read it)")
        self._shared_width(values)
        if ep is None:
            self.unknown["parallelism.ep"] = "expert parallelism not given"
        self._expert_tp(ep)

    def _shared_width(self, values: dict[str, Any]) -> None:
        """Megatron-LM gives the shared experts as one width (n_shared x the expert width):
        their count, when the run does not give it."""
        width = self.row.number("moe.shared_expert_ffn_hidden")
        expert = values.get("moe.expert_ffn_hidden")
        if width is None or values.get("moe.shared_experts") is not None:
            return
        if expert and width > 0 and "moe.shared_experts" in self.known:
            count = max(1, round(width / expert))
            self.sets["moe.shared_experts"] = count
            self.notes.append(f"shared experts: width {width:g} = {count} x the expert width "
                              f"{expert:g}")

    def _expert_tp(self, ep: int | None) -> None:
        etp = self.row.integer("parallel.etp", 1)
        if etp is None and ep is not None and ep > 1:
            # Megatron-core defaults etp to tp; a published layout where tp x ep does not fit
            # the ranks of a stage ran with etp = 1 (the MoE recipes' usual choice).
            tp = self.sets["parallelism.tp"]
            ranks = tp * self.sets["parallelism.cp"] * self.sets["parallelism.dp"]
            if tp > 1 and ranks % (tp * ep):
                etp = 1
                self.notes.append(f"etp not given, and etp = tp = {tp} times ep = {ep} does "
                                  f"not divide the {ranks} ranks of a stage: etp = 1")
        for key, value in (("parallelism.ep", ep), ("parallelism.etp", etp)):
            if value is not None and key in self.known:
                self.sets[key] = value
            elif value is not None and value > 1:
                self.notes.append(f"{key} = {value} ignored (no loaded formula reads it)")

    # -- training --------------------------------------------------------------------------------
    def training(self) -> None:
        row, sets = self.row, self.sets
        written = (row.text("parallel.recompute") or "unknown").strip()
        found = first_match(self.conv.recompute, written)
        if found is not None and found.value is not None:
            sets["training.recompute"] = found.value
            self._recompute_modules(written)
        else:
            # Left out: operators recompute only as much as memory demands (Megatron-LM's
            # --recompute-num-layers), which the formulas' `auto` choice solves for. The run
            # ran, so its tensors fit: the allocator slack fitted to torchtitan's reserved
            # memory is no reason to recompute more.
            sets["training.recompute"] = "auto"
            sets["training.allocator_overhead"] = 0
            self.notes.append(f"recompute {written}: auto (just enough layers recomputed in "
                              "full for the tensors to fit, the others selective -- which "
                              "recomputes nothing under a fused attention kernel -- as a tuned "
                              "run would; no allocator slack)")
        text = (row.text("precision") or self._precision_flags() or "bf16").strip()
        found = first_match(self.conv.precisions, text)
        if found is None or found.value is None:
            why = (found.note if found is not None
                   else "it is not one of bf16, fp16, fp8, nvfp4, tf32")
            raise Skip(f"precision '{text}': {why}")
        sets["training.precision"] = found.value
        if found.note:
            self.notes.append(found.note)
        sets["training.flash_attention"] = True
        self.document_mask()

    def _precision_flags(self) -> str | None:
        """The precision as switches (Hugging Face `bf16: true`, Megatron-LM `--fp16`,
        `--fp8-format hybrid`), most specific first, when no precision is written."""
        for flag in PRECISION_FLAGS:
            for key, item in self.row.fields.items():
                if key.rsplit(".", 1)[-1] != flag:
                    continue
                value = item.plain()
                on = as_flag(value) if isinstance(value, (bool, str)) else None
                if on or (on is None and isinstance(value, str) and value.strip()):
                    self.notes.append(f"precision not written: {self.row.written.get(key, key)}"
                                      f" = {value!r} read as {flag.split('_')[0]}")
                    return flag.split("_")[0]
        return None

    def document_mask(self) -> None:
        """A document length given in words (\"mean document length 2,048 tokens\") sets
        training.document_length; a document mask named without a length is noted, priced over
        the whole causal sequence (the most it can cost). A stated training.document_length
        passes through unchanged."""
        row = self.row
        if row.get("training.document_length") is not None:
            return
        words = [self.texts["texts"]] + [
            str(item.plain()) for name in ("batch", "training", "model")
            for item in row.section(name).values() if isinstance(item.plain(), str)]
        text = " ".join(words)
        found = DOC_LENGTH.search(text)
        if found and "training.document_length" in self.known:
            digits = found.group(1).replace(",", "").rstrip(".")
            try:
                length = float(digits) * (1024 if found.group(2) else 1)
            except ValueError:  # "1.2.3": not a length; the mask is noted below
                length = 0.0
            length = int(length) if length.is_integer() else length
            if 0 < length < math.inf:
                self.sets["training.document_length"] = length
                self.notes.append(f"document mask: mean document length {length:g} tokens "
                                  f"(read from '{found.group(0).strip()}')")
                return
        if DOC_MASK.search(text):
            self.notes.append("document mask stated without a document length: attention "
                              "priced over the whole causal sequence (training.document_length "
                              "0), the most it can cost; give batch.mean_document_length to "
                              "price the mask")

    # -- conventions and the run's own settings --------------------------------------------------
    def frameworks(self) -> None:
        """Each framework convention whose conditions hold sets its keys."""
        own = {target: item.plain() for target, item, _ in self.own_fields
               if target is not None}
        for rule in self.conv.frameworks:
            # the config as the run gives it: a knob it leaves out is not a condition's value,
            # and a field the run states itself (read below) is one, so `unset` does not fire
            stated = {**{k: v for k, v in self.sets.items() if k not in self.unknown}, **own}
            if not holds(rule.when, self.texts, stated):
                continue
            # the run's own value of a key wins (pass_through): a convention all of whose keys
            # the run states itself sets nothing and is not listed among the assumptions
            sets = {k: v for k, v in rule.sets.items() if k in self.known and k not in own}
            if not sets:
                continue
            self.sets.update(sets)
            for key in sets:  # the convention gives what the run left out
                self.unknown.pop(key, None)
            when = rule.when.get("published_before")
            stamp = published(self.texts["source"], when) if when else ""
            self.notes.append(rule.note.replace("{published}", stamp or ""))

    def pass_through(self) -> None:
        """Fields of the run a loaded formula reads, under their config key; the others are
        listed as ignored. A run's own value always wins over a convention."""
        for target, item, written in self.own_fields:
            if target is None:
                self.notes.append(f"{written} ignored (no loaded formula reads it)")
                continue
            value = self.value_for(target, item.value, written)
            if value is not None:
                self.sets[target] = value

    @cached_property
    def own_fields(self) -> list[tuple[str | None, Any, str]]:
        """The run's fields outside those read explicitly: (config key a loaded formula
        reads, or None; the field; its name as written). Read by the conventions and again when
        they pass through, so found once per run."""
        out: list[tuple[str | None, Any, str]] = []
        for section, prefixes in PASS_THROUGH.items():
            for key, item in self.row.section(section).items():
                if "." in key or (section == "model" and key in MODEL_FIELDS) \
                        or (section == "parallel" and key in PARALLEL_FIELDS) \
                        or (section == "hardware" and key in HARDWARE_FIELDS) \
                        or (section == "moe" and (key in MOE_FIELDS or key in MOE_READ)) \
                        or key in PRECISION_FLAGS:
                    continue
                target = next((f"{p}.{key}" for p in prefixes if f"{p}.{key}" in self.known),
                              None)
                written = self.row.written.get(f"{section}.{key}", f"{section}.{key}")
                out.append((None if target in RESERVED_KEYS else target, item, written))
        return out

    def value_for(self, key: str, value: Any, written: str) -> Any:
        """A run's value for an input as the input takes it: on/off for a share (the
        framework's documented figure), spellings of a choice, yes/no for a switch. A value
        the input cannot take is dropped with a note (the input keeps its default)."""
        d = self.ctx.inputs[key]
        kind = d.domain.kind
        flag = as_flag(value) if isinstance(value, (bool, str)) else None
        if flag is None and isinstance(value, str) and key in self.conv.switches:
            flag = self.conv.switches[key].read(value)  # "userbuffers (TP_COMM_OVERLAP=True)"
        if kind in ("number", "integer") and flag is not None and isinstance(value, (bool, str)) \
                and key in self.conv.switches:
            switch = self.conv.switches[key]
            figure = switch.on if flag else switch.off
            if isinstance(figure, dict):
                figure = self.ctx.inputs[figure["input"]].default
            if flag:
                self.notes.append(f"{written} on: {key} = {figure:g} ({switch.note})")
            return figure
        if kind == "boolean" and flag is not None:
            return flag
        if kind == "choice":
            labels = {label for label, _ in d.choices}
            word = str(value).strip().lower()
            spellings = self.conv.choices.get(key, {})
            words = re.sub(r"[\s-]+", "_", word)
            label = word if word in labels else spellings.get(words)
            if label is None:  # a sentence: the one choice it names ("all-gather of K and V")
                found = {sp: lab for sp, lab in {**{x: x for x in labels}, **spellings}.items()
                         if re.search(rf"(?<![a-z0-9]){re.escape(sp)}(?![a-z0-9])", words)}
                named = set(found.values())
                if len(named) > 1:  # "true (--impl te)": the named choice beats the on/off word
                    named = {lab for sp, lab in found.items() if as_flag(sp) is None}
                label = named.pop() if len(named) == 1 else None
            if label in labels:
                return label
        else:
            from ..config import _parse_quantity_text

            number = _parse_quantity_text(value, d.unit) if isinstance(value, str) else value
            if d.domain.problem(number) is None:
                return value  # as written: a unit ('2.4 TB/s') is read by the config stage
        kept = f"kept {key} = {self.sets[key]}" if key in self.sets else "the model's default"
        self.notes.append(f"{written} = {value!r} ignored: {key} {self._wants(d)}; {kept}")
        return None

    @staticmethod
    def _wants(d: Any) -> str:
        if d.domain.kind == "choice":
            return "is one of " + ", ".join(label for label, _ in d.choices)
        if d.domain.kind == "boolean":
            return "is true or false"
        return f"must be {d.domain.text}"
