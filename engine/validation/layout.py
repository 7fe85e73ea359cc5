"""The parallel layout and the batch of a run, and the knobs it leaves out.

A knob a run leaves out (an interleaving factor it does not report, the micro-batch, expert
parallelism) takes the value the framework's published recipe used for that model and scale
(conventions.yaml `recipes`), else the best feasible value `dlformula search` finds for the
stated layout (published runs are tuned), and the run's assumptions say which. The pipeline
split of uneven stages is the formulas' own (formulas/parallelism.yaml): the mapping never
computes it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .conventions import first_match, holds
from .feasible import OVER_MEMORY

if TYPE_CHECKING:  # annotations only: mapping.py calls this module's steps
    from .mapping import Mapper

# A row of torchtitan, whose "local batch size" rows copy as the micro-batch (`batch`).
TORCHTITAN = re.compile(r"(?i)torchtitan")
# Text that says a pipeline is interleaved, and text that says it is not.
INTERLEAVED = re.compile(r"interleav|looped|virtual", re.IGNORECASE)
# A negation at most two words before "interleav" ("not interleaved", "no virtual-stage
# interleaving"), so "interleaved (V not reported)" stays interleaved.
NOT_INTERLEAVED = re.compile(r"\b(?:not|no|without|non)[\s-]+(?:[\w-]+\s+){0,2}interleav|"
                             r"non-?interleav", re.IGNORECASE)
# Hybrid sharding (PyTorch FSDP HYBRID_SHARD, "HSDP"): sharded inside a node, replicated across.
HYBRID = re.compile(r"hybrid|\bhsdp\b", re.IGNORECASE)
# A shard group written out ("FSDP shard group 128 GPUs"); without it, a node.
SHARD_GROUP = re.compile(r"shard group (?:of )?(\d+)", re.IGNORECASE)
RESHARD = re.compile(r"reshard_after_forward\s*[=:]\s*true", re.IGNORECASE)
# An interleaving factor written in text: "v=4", "vpp 4", "4 chunks", "4 virtual stages".
FACTOR = re.compile(r"\b(?:v|vpp|vp)\s*[=:]?\s*(\d+)\b|\b(\d+)\s*(?:model\s+)?(?:chunks|virtual)",
                    re.IGNORECASE)


def layout(m: Mapper) -> None:
    row, sets, notes = m.row, m.sets, m.notes
    tp = row.integer("parallel.tp", 1) or 1
    pp = row.integer("parallel.pp", 1) or 1
    cp = row.integer("parallel.cp", 1) or 1
    count = row.integer("hardware.count", 1)
    nodes, per_node = row.integer("hardware.nodes", 1), row.integer("hardware.gpus_per_node", 1)
    if count is None and nodes is not None and per_node is not None:
        count = nodes * per_node
        notes.append(f"GPU count: {nodes} nodes x {per_node} GPUs per node = {count}")
    dp = row.integer("parallel.dp", 1)
    if dp is None:
        if count is None:
            m.invalid("gives neither parallel.dp nor hardware.count; add the GPU count")
        dp = max(1, (count or 1) // (tp * pp * cp))
        notes.append(f"dp not given: hardware.count / (tp x pp x cp) = {dp}")
    elif count is not None and tp * pp * cp * dp != count and count % (tp * pp * cp) == 0:
        # Two stated numbers disagree; the GPU count is what ran (Megatron-LM: dp = world size
        # / (tp x pp x cp)).
        notes.append(f"dp = {dp} given, but hardware.count / (tp x pp x cp) = "
                     f"{count // (tp * pp * cp)}: the GPU count wins")
        dp = count // (tp * pp * cp)
    sets.update({"hardware.gpus": count or tp * pp * cp * dp, "parallelism.tp": tp,
                 "parallelism.pp": pp, "parallelism.dp": dp, "parallelism.cp": cp})
    sp = row.flag("parallel.sp")
    if sp is None and tp > 1:
        notes.append("sp not given: on (tp > 1)")
    sets["parallelism.sp"] = sp if sp is not None else tp > 1
    fsdp = (row.text("parallel.fsdp") or "").lower()
    if re.fullmatch(r"-?\d+", fsdp.strip()):  # a shard degree (torchtitan: -1 = every rank left)
        fsdp = "" if int(fsdp) in (0, 1) else "full_shard"
    zero = row.integer("parallel.zero", 0)
    if zero is None and fsdp not in ("", "false", "no", "none", "no_shard"):
        zero = 2 if "grad_op" in fsdp else 3
    if zero is None:
        zero = 1
        notes.append("zero not given: 1 (distributed optimizer)")
    sets["parallelism.zero"] = zero
    if zero >= 1 and HYBRID.search(fsdp):
        # PyTorch FSDP's HYBRID_SHARD shards inside a node and replicates across nodes. The
        # shard group holds data- and context-parallel ranks alike (parallelism.dp_shard counts
        # both, as Megatron-LM's and OLMo-core's shard meshes flatten cp into it): its GPUs / tp.
        group = SHARD_GROUP.search(fsdp)
        node_gpus = per_node or (m.ctx.node_gpus or {}).get(sets.get("hardware.node", ""))
        shard = int(group.group(1)) // tp if group else (node_gpus or 8) // tp
        if 1 < shard < dp * cp and (dp * cp) % shard == 0:
            sets["parallelism.dp_shard"] = shard
            notes.append(f"hybrid sharding: states sharded over the {shard} data"
                         + ("- and context-" if cp > 1 else "-") + "parallel ranks "
                         + (f"of a group of {group.group(1)} GPUs" if group else
                            f"of a node{'' if node_gpus else ' (8 GPUs per node assumed)'}")
                         + ", replicated across the others (parallelism.dp_shard)")
    if zero >= 3 and pp > 1 and RESHARD.search(fsdp):
        sets["parallelism.fsdp_pp_reshard"] = True
        notes.append("FSDP reshards after every forward under pipeline parallelism "
                     "(reshard_after_forward=True): one weight all-gather per micro-batch "
                     "(parallelism.fsdp_pp_reshard)")
    _interleaving(m, pp)


def _interleaving(m: Mapper, pp: int) -> None:
    """vpp and the schedule: as stated; an interleaved schedule without its factor is a knob
    left out; interleaving without pipeline parallelism is ignored, as frameworks ignore it."""
    row, sets, notes = m.row, m.sets, m.notes
    item = row.get("parallel.vpp")
    schedule = row.text("parallel.pp_schedule") or ""
    written = row.written.get("parallel.vpp", "vpp")
    vpp = 1
    if item is not None and not isinstance(item.value, str):
        vpp = row.integer("parallel.vpp", 1) or 1
    elif item is not None:
        factor = FACTOR.search(item.value)
        if factor or re.match(r"^\s*\d", item.value):
            vpp = int(factor.group(1) or factor.group(2)) if factor else \
                row.integer("parallel.vpp", 1) or 1
    texts = [str(item.value) if item is not None else "", schedule]
    interleaved = any(INTERLEAVED.search(t) and not NOT_INTERLEAVED.search(t) for t in texts)
    if pp == 1 and (vpp > 1 or interleaved):
        what = f"{written} = {_shown(item.value)}" if item is not None else \
            f"pp_schedule {_shown(schedule)}"
        notes.append(f"{what} ignored: interleaving needs pipeline parallelism (pp = 1)")
        vpp = 1
    elif interleaved and vpp == 1 and (item is None or isinstance(item.value, str)):
        text = item.value if item is not None else schedule
        m.unknown["parallelism.vpp"] = f"interleaved ({_shown(text)}) without the factor"
    elif item is not None and isinstance(item.value, str) and vpp == 1:
        notes.append(f"{written} given as {item.value[:40]!r}: 1 (no interleaving)")
    elif item is None and not schedule and pp > 1:
        # Neither the factor nor the schedule stated: a tuned pipeline run interleaves when
        # that is faster and fits (Megatron-LM's interleaved 1F1B, Narayanan et al. 2021).
        m.unknown["parallelism.vpp"] = "pipeline schedule and interleaving not given"
    sets["parallelism.vpp"] = vpp
    if schedule and "parallelism.schedule" in m.known:
        found = first_match(m.conv.schedules, re.sub(r"[^a-z0-9]", "", schedule.lower()))
        if found is not None:
            sets["parallelism.schedule"] = found.value
        else:
            notes.append(f"pipeline schedule {schedule!r} not modelled: 1F1B")


def batch(m: Mapper) -> None:
    row, sets, notes = m.row, m.sets, m.notes
    dp, pp = sets["parallelism.dp"], sets["parallelism.pp"]
    micro = row.integer("batch.micro_batch", 1)
    gbs = row.integer("batch.global_batch", 1)
    local = row.integer("batch.local_batch", 1)
    tokens = row.integer("batch.global_batch_tokens", 1)
    accum = row.integer("batch.grad_accum", 1)
    per_pass = micro if micro is not None else local
    if gbs is None and accum is not None and per_pass is not None:
        gbs = per_pass * accum * dp
        notes.append(f"global batch: micro-batch {per_pass} x accumulation {accum} x dp {dp} = "
                     f"{gbs}")
    if gbs is None and tokens is not None:
        gbs = max(1, round(tokens / sets["training.seq_len"]))
        notes.append(f"global batch of {tokens} tokens: {gbs} sequences")
    if gbs is None and local is not None:
        gbs = local * dp
        notes.append(f"global batch: local batch {local} x dp {dp} = {gbs}")
    if micro is None and local is not None and pp == 1:
        micro = local
    if gbs is None:
        gbs = dp * (micro or 1)
        notes.append(f"global batch not given: one micro-batch per replica ({gbs})")
    per_replica = gbs // dp if gbs % dp == 0 else None
    if micro is not None and pp > 1 and per_replica is not None and micro == per_replica \
            and per_replica % pp == 0 and per_replica > 1 and TORCHTITAN.search(m.texts["texts"]):
        # torchtitan names the local batch ("local batch size 32") and splits it into pp
        # pipeline micro-batches by default; a row copying that figure as the micro-batch means
        # the local batch. Elsewhere a micro-batch equal to the local batch is one micro-batch
        # (a tutorial measuring the bubble of m = 1, nanotron with no accumulation).
        micro = per_replica // pp
        notes.append(f"micro_batch {per_replica} is the whole local batch: split into pp = "
                     f"{pp} pipeline micro-batches of {micro} (torchtitan's default number "
                     "of micro-batches)")
    if micro is None:
        micro = 1
        m.unknown["training.micro_batch"] = "micro-batch not given"
    sets["training.micro_batch"] = micro
    sets["training.global_batch"] = gbs
    sets["training.tokens"] = gbs * sets["training.seq_len"]  # one step; no target uses it


def knobs(m: Mapper) -> None:
    """Knobs the run leaves out: a published recipe's value, else the best feasible one."""
    left = {k: why for k, why in m.unknown.items() if k in m.known}
    for knob in list(left):
        recipe = next((r for r in m.conv.recipes
                       if r.knob == knob and holds(r.when, m.texts, m.sets)), None)
        if recipe is not None:
            m.sets[knob] = recipe.value
            m.notes.append(f"{left.pop(knob)}: {knob} = {recipe.value}, the published recipe's "
                           f"value ({recipe.source})")
    if not left:
        return
    best = m.ctx.best(dict(m.sets), list(left)) if m.ctx.best is not None else None
    if best:
        over = best.pop(OVER_MEMORY, False)
        m.sets.update(best)
        chosen = ", ".join(f"{k} = {v}" for k, v in best.items())
        m.notes.append(f"{'; '.join(left.values())}: {chosen}, the best feasible value "
                       "`dlformula search` finds for the stated layout (no published recipe "
                       "known" + ("; no value fits the model's memory estimate, so the fastest, "
                                  "as the run ran)" if over else ")"))
    else:
        kept = ", ".join(f"{k} = {m.sets.get(k, 'the default')}" for k in left)
        m.notes.append(f"{'; '.join(left.values())}: {kept} (no published recipe known, and "
                       "no feasible value found for the stated layout)")


def _shown(value: object) -> str:
    return repr(value[:60]) if isinstance(value, str) else str(value)
