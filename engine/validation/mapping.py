"""The mapping: one row of a runs file -> config keys (`--set` strings) by the table in
docs/validation.md, recording every default it had to pick. A row the model cannot express
raises `Skip` with the reason.

Nothing here is tuned per row: the mapping reads only what a row states (and documented
defaults where it is silent), never its `measured`, `derived` or `target` figures.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from .conventions import (
    DEEPEP,
    EP_OVERLAP,
    FA3_WORDS,
    FLASH_ARXIV_YYMM,
    FLASH_YEAR,
    GLOBAL_BATCH_FIELDS,
    GPU_PATTERNS,
    GPU_VARIANTS,
    MICRO_BATCH_FIELDS,
    MODEL_FIELDS,
    MOE_FIELDS,
    NVIDIA_RECIPES,
    PARALLEL_FIELDS,
    PRECISIONS,
    RECOMPUTE,
    RESERVED_KEYS,
)
from .runsfile import Row


class Skip(Exception):
    """A row the model cannot express; the message says why."""


class Mapped(NamedTuple):
    sets: list[str]
    assumptions: list[str]



def _node_for(gpu: str, node_ids: list[str]) -> str | None:
    low = gpu.lower()
    for pattern, node in GPU_PATTERNS:
        if re.search(pattern, low) and node in node_ids:
            return node
    return None


# Words in a run's source, notes or architecture that name a stack whose attention kernel is

def _flash_attention(source: str, arch: str) -> tuple[bool, str | None]:
    """Fused attention on or off, from what the row says or when it was published."""
    low = arch.lower()
    if "flash" in low or "fused attention" in low:
        return True, None
    m = re.search(r"arxiv[:\s]*(\d{4})\.\d{4,5}", source, re.IGNORECASE)
    if m:
        yymm = int(m.group(1))
        if yymm < FLASH_ARXIV_YYMM:
            return False, (f"unfused attention: published as arXiv {m.group(1)}, before "
                           "FlashAttention (2205.14135) reached training frameworks")
        return True, None
    m = re.search(r"\b(20[0-9]{2})\b", source)
    if m and int(m.group(1)) < FLASH_YEAR:
        return False, f"unfused attention: published in {m.group(1)}, before FlashAttention"
    return True, None


def map_row(row: Row, known: set[str], node_ids: list[str],
            node_hbm: dict[str, tuple[float, str]]) -> Mapped:
    """Config keys for one row. Raises Skip when the model cannot express it.

    `known` holds the config keys of the loaded model's inputs (plugins add keys), `node_hbm`
    each node's HBM capacity spec (value, unit), to tell a 96 GB part from an 80 GB one.
    """
    m = _Mapper(row, known)
    m.model()
    m.hardware(node_ids, node_hbm)
    m.layout()
    m.moe()
    m.training()
    m.batch()
    return Mapped([f"{k}={_fmt(v)}" for k, v in m.sets.items()], m.notes)


class _Mapper:
    """Builds one row's config keys (`sets`) and the defaults it picked (`notes`)."""

    def __init__(self, row: Row, known: set[str]) -> None:
        self.row = row
        self.known = known
        self.sets: dict[str, Any] = {}
        self.notes: list[str] = []
        self.arch = (row.text("model.arch") or "").lower()

    def set_known(self, key: str, value: Any, note: str | None = None) -> None:
        """Set `key` if a loaded formula reads it (plugins add keys)."""
        if key in self.known:
            self.sets[key] = value
            if note:
                self.notes.append(note)

    def model(self) -> None:
        row, sets, notes, arch = self.row, self.sets, self.notes, self.arch
        required = ("layers", "hidden", "heads", "vocab")
        missing = [k for k in required if row.get(f"model.{k}") is None]
        if row.get("model.seq_len") is None and row.get("batch.seq_len") is None:
            missing.append("seq_len")
        if missing:
            raise Skip(f"the row does not give model.{', model.'.join(missing)}")
        for key in required:
            sets[f"model.{key}"] = row.integer(f"model.{key}", 1)
        sets["training.seq_len"] = (row.integer("model.seq_len", 1)
                                    or row.integer("batch.seq_len", 1))
        if None in (sets["model.hidden"], sets["model.heads"], sets["training.seq_len"]):
            raise Skip("malformed model fields")  # reported with their lines
        hidden: int = sets["model.hidden"]
        sets["model.kv_heads"] = row.integer("model.kv_heads", 1) or sets["model.heads"]
        ffn = row.integer("model.ffn_hidden", 1)
        if ffn is None:
            ffn = 4 * hidden
            notes.append("ffn_hidden not given: 4 x hidden")
        sets["model.ffn_hidden"] = ffn
        if row.get("model.head_dim") is not None:
            sets["model.head_dim"] = row.integer("model.head_dim", 1)
        glu = row.flag("model.glu")
        if glu is None:
            if re.search(r"swiglu|geglu|glu|llama|mixtral|gated", arch):
                glu = True
            elif re.search(r"gelu|relu", arch):
                glu = False
            else:
                glu = ffn != 4 * hidden
                notes.append(f"MLP {'gated (SwiGLU)' if glu else 'GeLU'}: inferred from "
                             f"ffn_hidden = {ffn / hidden:g} x hidden")
        sets["model.glu"] = glu
        gpt_style = not glu  # GeLU MLPs: GPT-3, MPT, Megatron GPT
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
        # Any other field a loaded formula reads (mla.*, moe.* from a plugin) passes through.
        moe_aliases = {a for aliases in MOE_FIELDS.values() for a in aliases}
        for section, prefixes in (("model", ("model", "mla")), ("mla", ("mla",)),
                                  ("moe", ("moe",))):
            for key, item in row.section(section).items():
                if key in moe_aliases or (section == "model" and key in MODEL_FIELDS):
                    continue
                if isinstance(item.value, dict) and key in ("mla", "moe"):
                    # a nested block (model.mla: {kv_lora_rank: ...}) as its own section
                    for sub, value in item.value.items():
                        if f"{key}.{sub}" in self.known:
                            sets[f"{key}.{sub}"] = value.value
                        else:
                            notes.append(f"{section}.{key}.{sub} ignored (no loaded formula "
                                         "reads it)")
                    continue
                target = next((f"{p}.{key}" for p in prefixes if f"{p}.{key}" in self.known),
                              None)
                if target is not None:
                    sets[target] = item.value
                else:
                    notes.append(f"{section}.{key} ignored (no loaded formula reads it)")

    def moe(self) -> None:
        """MoE fields map to the moe plugin's keys; without the plugin the row is skipped."""
        row = self.row
        values: dict[str, Any] = {}
        for config_key, aliases in MOE_FIELDS.items():
            for key in (f"{s}.{a}" for s in ("moe", "model") for a in aliases):
                if config_key not in values and row.get(key) is not None:
                    values[config_key] = row.number(key, minimum=0)
        ep = row.integer("parallel.ep", 1) or 1
        experts = values.get("moe.experts") or 0
        if experts <= 1 and ep <= 1 and not re.search(r"\bmoe\b|mixture.of.experts", self.arch):
            return
        if "moe.experts" not in self.known:
            raise Skip("MoE needs the moe plugin")
        if experts <= 1:
            raise Skip("an MoE run that does not give its number of experts (model.experts)")
        for key, value in values.items():
            if value is None:
                continue
            if key in self.known:
                self.sets[key] = value
            else:
                self.notes.append(f"{key} ignored (the loaded MoE formulas do not read it)")
        etp = row.integer("parallel.etp", 1)
        if etp is None and ep > 1:
            # Megatron-core defaults etp to tp; a published layout where tp x ep does not fit
            # the ranks of a stage ran with etp = 1 (the MoE recipes' usual choice).
            tp = self.sets["parallelism.tp"]
            ranks = tp * self.sets["parallelism.cp"] * self.sets["parallelism.dp"]
            if tp > 1 and ranks % (tp * ep):
                etp = 1
                self.notes.append(f"etp not given, and etp = tp = {tp} times ep = {ep} does not "
                                  f"divide the {ranks} ranks of a stage: etp = 1")
        for key, value in (("parallelism.ep", ep), ("parallelism.etp", etp)):
            if value is not None and key in self.known:
                self.sets[key] = value
            elif value is not None and value > 1:
                self.notes.append(f"{key} = {value} ignored (no loaded formula reads it)")
        said = " ".join(row.text(k) or "" for k in ("source", "notes", "parallel.pp_schedule"))
        if re.search(DEEPEP, said, re.IGNORECASE) and row.get("moe.dispatcher") is None:
            self.set_known("moe.dispatcher", "deepep", "dispatcher DeepEP/HybridEP: one network "
                           "copy of a token per remote node")
        if re.search(EP_OVERLAP, said, re.IGNORECASE) \
                and row.get("parallel.ep_comm_overlap") is None:
            self.set_known("parallelism.ep_comm_overlap", True,
                           "all-to-all overlapped with another micro-batch's compute")

    def hardware(self, node_ids: list[str], node_hbm: dict[str, tuple[float, str]]) -> None:
        row, sets, notes = self.row, self.sets, self.notes
        gpu = row.text("hardware.gpu") or ""
        node = row.text("hardware.node")
        if node is not None and node not in node_ids:
            raise Skip(f"hardware.node '{node}' is not a known node (dlformula hardware)")
        node = node or _node_for(gpu, node_ids)
        if node is None:
            raise Skip(f"no hardware node for GPU '{gpu}'; add hardware.node to the row "
                       "(dlformula hardware lists them)")
        sets["hardware.node"] = node
        m = re.search(r"(\d+)\s*GB\b", gpu, re.IGNORECASE)
        spec = node_hbm.get(node)
        if m and spec and spec[1] in ("GiB", "GB") and float(m.group(1)) != spec[0]:
            sets["hardware.hbm_capacity"] = f"{m.group(1)} GiB"
            notes.append(f"{node} with {m.group(1)} GB of HBM (capacity from the GPU name)")
        for pattern, overrides, why in GPU_VARIANTS:
            if re.search(pattern, gpu.lower()):
                sets.update({k: v for k, v in overrides.items() if k in self.known})
                notes.append(why)
        m = re.search(r"(\d+)\s*W\b", gpu)
        if m:
            self.set_known("hardware.tdp", f"{m.group(1)} W",
                           f"power limit {m.group(1)} W: hardware.tdp")
        if row.get("hardware.gpus_per_node") is not None:
            sets["hardware.gpus_per_node"] = row.integer("hardware.gpus_per_node", 1)
        for key, item in row.section("hardware").items():
            if key not in ("gpu", "node", "count", "gpus_per_node", "interconnect"):
                self.set_known(f"hardware.{key}", item.value)

    def layout(self) -> None:
        row, sets, notes = self.row, self.sets, self.notes
        tp = row.integer("parallel.tp", 1) or 1
        pp = row.integer("parallel.pp", 1) or 1
        cp = row.integer("parallel.cp", 1) or 1
        count = row.integer("hardware.count", 1)
        dp = row.integer("parallel.dp", 1)
        if dp is None:
            if count is None:
                raise Skip("the row gives neither parallel.dp nor hardware.count")
            dp = max(1, count // (tp * pp * cp))
            notes.append(f"dp not given: hardware.count / (tp x pp x cp) = {dp}")
        sets.update({"hardware.gpus": count or tp * pp * cp * dp, "parallelism.tp": tp,
                     "parallelism.pp": pp, "parallelism.dp": dp, "parallelism.cp": cp})
        sp = row.flag("parallel.sp")
        if sp is None and tp > 1:
            notes.append("sp not given: on (tp > 1)")
        sets["parallelism.sp"] = sp if sp is not None else tp > 1
        fsdp = (row.text("parallel.fsdp") or "").lower()
        zero = row.integer("parallel.zero", 0)
        if zero is None and fsdp not in ("", "false", "no", "none", "no_shard"):
            zero = 2 if "grad_op" in fsdp else 3
        if zero is None:
            zero = 1
            notes.append("zero not given: 1 (distributed optimizer)")
        sets["parallelism.zero"] = zero
        said = f"{row.text('source') or ''} {row.text('notes') or ''}".lower()
        if zero >= 3 and "deepspeed" in said and row.get("parallel.dp_node_nics") is None:
            # DeepSpeed's ZeRO-3 of 2021 gathered parameters module by module and reached one
            # NIC's rate per GPU (docs/validation.md), not a node's aggregate NIC bandwidth.
            self.set_known("parallelism.dp_node_nics", False,
                           "DeepSpeed ZeRO-3: collectives at each rank's own NIC rate")

        vpp_item = row.get("parallel.vpp")
        schedule = (row.text("parallel.pp_schedule") or "").lower()
        vpp = 1
        if vpp_item is not None and isinstance(vpp_item.value, (int, float)) \
                and not isinstance(vpp_item.value, bool) and vpp_item.value >= 1 \
                and vpp_item.value == int(vpp_item.value):
            vpp = int(vpp_item.value)
        elif vpp_item is not None:
            notes.append(f"vpp given as {str(vpp_item.value)[:40]!r}: 1 (no interleaving "
                         "factor)")
        elif "interleav" in schedule and pp > 1:
            vpp = 2
            notes.append("interleaved schedule without a factor: vpp = 2 (torchtitan's "
                         "default of two stages per rank)")
        sets["parallelism.vpp"] = vpp
        if schedule and "parallelism.schedule" in self.known:
            label = _schedule_label(schedule)
            if label is not None:
                sets["parallelism.schedule"] = label
            else:
                notes.append(f"pipeline schedule {schedule!r} not modelled: 1F1B")
        layers = sets["model.layers"] or 1
        if pp > 1 and layers % pp:
            if "parallelism.first_stage_layers" not in self.known:
                raise Skip(f"{layers} layers do not split evenly over pp = {pp} stages, and "
                           "the loaded formulas have no uneven stages")
            first, last = _uneven_stages(layers, pp)
            sets["parallelism.first_stage_layers"] = first
            sets["parallelism.last_stage_layers"] = last
            chunks = f" (all {vpp} model chunks of a GPU together)" if vpp > 1 else ""
            notes.append(f"{layers} layers over {pp} stages{chunks}: {first} on the first, "
                         f"{last} on the last, {(layers - first - last) // max(pp - 2, 1)} on "
                         "each other stage")
        for key, item in row.section("parallel").items():
            if key not in PARALLEL_FIELDS:
                self.set_known(f"parallelism.{key}", item.value)

    def training(self) -> None:
        row, sets, notes = self.row, self.sets, self.notes
        written = (row.text("parallel.recompute") or "unknown").strip()
        recompute = _first_match(RECOMPUTE, written)
        if recompute == "selective" and "torchtitan" in (row.text("source") or "").lower():
            # torchtitan's selective checkpointing is per-op (its Llama 3 configs set
            # selective_ac_option = 'op'), not Megatron-LM's attention-only recompute.
            sets["training.recompute"] = "op"
            notes.append("torchtitan selective checkpointing: per-op policy (recompute = op)")
        elif recompute is not None:
            sets["training.recompute"] = recompute
        else:
            notes.append(f"recompute {written}: the model's default")
        text = (row.text("precision") or row.text("training.precision") or "bf16").strip()
        precision = _first_match(PRECISIONS, text, "")
        if not precision:
            raise Skip(f"precision '{text}' is not one of bf16, fp16, fp8, tf32 (fp32 runs as "
                       "tf32; 4-bit training is not modelled)")
        sets["training.precision"] = precision
        if re.search(r"fp32|float32", text, re.IGNORECASE) and precision == "tf32":
            notes.append("fp32 run modelled as tf32 tensor cores")
        flash, era = _flash_attention(row.text("source") or "", self.arch)
        sets["training.flash_attention"] = flash
        said = f"{row.text('source') or ''} {row.text('notes') or ''} {self.arch}".lower()
        if flash and row.get("training.attention_kernel") is None \
                and any(word in said for word in FA3_WORDS):
            # NeMo and Megatron-Core run attention through Transformer Engine, which picks
            # cuDNN's fused attention on Hopper; FlashAttention-3 is the same kernel class.
            self.set_known("training.attention_kernel", "fa3",
                           "attention through Transformer Engine (cuDNN fused attention, "
                           "FlashAttention-3 class)")
        if era:
            # Published before FlashAttention: the Megatron-LM of 2021-22 (Narayanan et al.
            # 2021, Korthikanti et al. 2022) ran dropout 0.1, whose masks Korthikanti's
            # activation formulas count, and reduced gradients after the backward pass without
            # overlap (Korthikanti et al. 2022, sec. 6.3: "no overlap of grad all-reduce").
            notes.append(era)
            for key, value, note in (
                    ("training.dropout", True, "dropout on (GPT-3-era recipe)"),
                    ("parallelism.overlap_grad_reduce", False,
                     "gradient reduction not overlapped"),
                    ("parallelism.overlap_param_gather", False, None),
                    ("parallelism.overlap_p2p_comm", False, None)):
                if row.get(key.replace("parallelism.", "parallel.")) is None:
                    self.set_known(key, value, note)
        if re.search(NVIDIA_RECIPES, said) and row.get("training.grad_bytes") is None:
            self.set_known("training.grad_bytes", 2,
                           "NVIDIA performance recipe: gradients reduced in bf16 (2 bytes)")
        if sets["training.precision"] == "fp16":
            # fp16 mixed precision keeps fp16 gradients (Micikevicius et al. 2018); Megatron-LM
            # accumulates and reduces them in fp32 only for bf16.
            self.set_known("training.grad_bytes", 2, "fp16 gradients (2 bytes)")
        if row.flag("parallel.async_tp"):
            # No source gives the share of TP traffic async TP hides; the default stands.
            notes.append("async TP: not modelled (tp_comm_overlap left at its default)")
        for key, item in row.section("training").items():
            if f"training.{key}" not in RESERVED_KEYS:
                self.set_known(f"training.{key}", item.value)

    def batch(self) -> None:
        row, sets, notes = self.row, self.sets, self.notes
        dp, pp = sets["parallelism.dp"], sets["parallelism.pp"]
        micro = _first_given(row, "batch", MICRO_BATCH_FIELDS)
        if micro is None:
            micro = 1
            notes.append("micro_batch not given: 1")
        gbs = _first_given(row, "batch", GLOBAL_BATCH_FIELDS)
        tokens = _first_given(row, "batch", ("global_batch_tokens",))
        if gbs is None and tokens is not None:
            gbs = max(1, round(tokens / sets["training.seq_len"]))
            notes.append(f"global batch of {tokens} tokens: {gbs} sequences")
        if gbs is None:
            gbs = dp * micro
            notes.append(f"global batch not given: one micro-batch per replica ({gbs})")
        local = gbs // dp if gbs % dp == 0 else None
        if pp > 1 and local is not None and micro == local and local % pp == 0 and local > 1:
            # A pipeline run with one micro-batch is never what was measured: the source gave
            # the local batch (torchtitan: "local batch size 32").
            micro = local // pp
            notes.append(f"micro_batch {local} is the whole local batch: split into pp = {pp} "
                         f"pipeline micro-batches of {micro} (torchtitan's default number of "
                         "micro-batches)")
        sets["training.micro_batch"] = micro
        sets["training.global_batch"] = gbs
        sets["training.tokens"] = gbs * sets["training.seq_len"]  # one step; no target uses it


def _first_given(row: Row, section: str, fields: tuple[str, ...]) -> int | None:
    """The first of `fields` the row gives in `section`, as an integer >= 1."""
    for name in fields:
        value = row.integer(f"{section}.{name}", 1)
        if value is not None:
            return value
    return None


def _first_match(table: list[tuple[str, str | None]], text: str,
                 default: str | None = None) -> str | None:
    """The value of the first pattern of `table` found in `text` (case-insensitive)."""
    for pattern, value in table:
        if re.search(pattern, text, re.IGNORECASE):
            return value
    return default


def _schedule_label(text: str) -> str | None:
    """A source's pipeline-schedule name -> the model's `parallelism.schedule` label."""
    t = re.sub(r"[^a-z0-9]", "", text.lower())
    if "dualpipe" in t:
        return "dualpipe"
    if t.startswith("zb") or "zerobubble" in t:
        return "zb-h1"
    if "1f1b" in t or "gpipe" in t:
        return "1f1b"
    return None


def _uneven_stages(layers: int, pp: int) -> tuple[int, int]:
    """Blocks on the first and last stage when `layers` does not divide by `pp`: every middle
    stage takes ceil(layers / pp) and the first and last share the rest (the split torchtitan
    and Megatron-LM's uneven-stage options produce for such counts)."""
    if pp == 2:
        return -(-layers // 2), layers // 2
    middle = -(-layers // pp)
    rest = layers - (pp - 2) * middle
    while rest < 2:  # too few left for the ends: shrink the middle stages
        middle -= 1
        rest = layers - (pp - 2) * middle
    return rest - rest // 2, rest // 2


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


