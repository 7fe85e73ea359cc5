"""The data-parallel all-reduce the model prices, against published nccl-tests measurements.

A training run's data-parallel all-reduce is priced by formulas/comm.yaml (`dp_grad_bucket_time`,
one gradient bucket's collective). This script sets up, for each published all-reduce measurement
below, a data-parallel group of the same ranks on the same node (tp 1, ZeRO-0, so the gradients
are all-reduced) with gradient buckets of the measured message size, takes the engine's time for
one bucket, and prints the bus bandwidth it gives (2 (n - 1) / n x bucket bytes / time, as
nccl-tests reports it) beside the measurement. It checks the collective model apart from any
training run: a collective the model prices wrong shows here before it hides in a step time.

    python bench/collectives.py

Measurements (all-reduce, in-place or out-of-place as printed, GB/s bus bandwidth):

- coreweave/nccl-tests README.md @ cb865533 ('Expected Performance', GB200, NCCL 2.26.2): one
  NVL72 rack (72 GPUs), 2 racks (144) and 20 racks (1,440), 8 GiB and 16 GiB messages
  (8,589,934,592 and 17,179,869,184 bytes).
- NVIDIA/nccl issue #1801 (NCCL 2.27.3, GB200, NCCL_NVLS_ENABLE=0, ring): three NVLink partitions
  in three racks joined by InfiniBand only, 4 and 8 GPUs in each, 16 GiB. The partition is the
  scale-up domain here (`hardware.scaleup_domain`).

Asserts nothing; stop 55 of docs/validation.md reads it.
"""

from __future__ import annotations

from dlformula.core import Engine

BASE = "examples/llama3-70b.yaml"
GIB = 2**30

# (label, node, GPUs, scale-up domain or None for the node's, message bytes, measured GB/s, source)
CASES = [
    ("GB200 1 rack, 72 GPUs, 8 GB", "gb200-nvl72", 72, None, 8 * GIB, 834.57, "CoreWeave"),
    ("GB200 2 racks, 144 GPUs, 8 GB", "gb200-nvl72", 144, None, 8 * GIB, 793.06, "CoreWeave"),
    ("GB200 2 racks, 144 GPUs, 16 GB", "gb200-nvl72", 144, None, 16 * GIB, 810.41, "CoreWeave"),
    ("GB200 20 racks, 1,440 GPUs, 8 GB", "gb200-nvl72", 1440, None, 8 * GIB, 381.48, "CoreWeave"),
    ("GB200 20 racks, 1,440 GPUs, 16 GB", "gb200-nvl72", 1440, None, 16 * GIB, 405.74,
     "CoreWeave"),
    ("GB200 3 partitions x 4 GPUs, 16 GiB", "gb200-nvl72", 12, 4, 16 * GIB, 196.7,
     "nccl#1801"),
    ("GB200 3 partitions x 8 GPUs, 16 GiB", "gb200-nvl72", 24, 8, 16 * GIB, 393.7, "nccl#1801"),
]


def modelled_busbw(engine: Engine, node: str, gpus: int, domain: int | None,
                   size: float) -> tuple[float, float]:
    """(bus bandwidth in GB/s the model gives one all-reduce of about `size` bytes over `gpus`
    ranks -- a gradient bucket of that size, the engine's dp_grad_bucket_time --, its
    dp_bandwidth in GB/s)."""
    sets = [f"hardware.node={node}", f"hardware.gpus={gpus}", "parallelism.tp=1",
            "parallelism.pp=1", "parallelism.vpp=1", "parallelism.cp=1", f"parallelism.dp={gpus}",
            "parallelism.zero=0", "training.grad_bytes=2", f"parallelism.bucket_size={size / 2:g}",
            "training.micro_batch=1", f"training.global_batch={gpus}", "training.recompute=full"]
    if domain is not None:
        sets.append(f"hardware.scaleup_domain={domain}")
    r = engine.evaluate(BASE, sets)
    n = r["dp_group"]
    bucket = r["grad_reduce_bytes"] / r["dp_buckets"]
    return 2 * (n - 1) / n * bucket / r["dp_grad_bucket_time"] / 1e9, r["dp_bandwidth"] / 1e9


def main() -> None:
    engine = Engine()
    print(f"{'all-reduce':38} {'measured':>9} {'model':>7} {'model/meas':>10}  "
          f"{'dp_bandwidth':>12}  source")
    for label, node, gpus, domain, size, measured, source in CASES:
        busbw, link = modelled_busbw(engine, node, gpus, domain, size)
        print(f"{label:38} {measured:9.1f} {busbw:7.1f} {busbw / measured:10.2f}  "
              f"{link:12.1f}  {source}")


if __name__ == "__main__":
    main()
