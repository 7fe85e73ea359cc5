"""Sweep benchmark: configurations per second, vectorized against one at a time, and the peak
memory of a 10-million-config sweep. Prints figures; it asserts nothing (these machines are
noisy: read the ratios, and take the best of a few runs).

    python bench/bench_sweep.py [--configs 2000000] [--scalar 20000] [--big 10000000]
                                [--scaling 100000000]

1. `evaluate` of the full model (every quantity) over arrays, in the sweep's chunks, the way
   the CLI's sweep calls it: each block's results dropped before the next block (a loop that
   keeps the previous block's results alive hides the allocator churn runtime.tune_allocator
   removes: compare with DLFORMULA_TUNE_MALLOC=0);
2. `sweep()` end to end: grid blocks, constraints (counted), the pruned evaluator for the key
   results, a --where filter and the best 20 rows kept; once on a layout x run-length grid
   (NumPy broadcasting computes each quantity over the axes it depends on) and once over a
   single axis every quantity depends on (no such gain: the evaluator's raw speed);
3. `model.evaluate` one config at a time (plain Python floats, the `eval` path);
4. a 10M-config `sweep()` in a fresh process, its peak RSS against a process that only loaded
   the engine;
5. scaling: the same kind of sweep with --scaling configs (default 10^8) on 1 and 2 worker
   processes, and the fixed costs a reader needs to project a larger run: per block (a sweep
   of one-config blocks) and per task (a round trip to a worker process).
All in the same run, on the same configs (Llama 3 70B on 512 H100s, layouts and run lengths).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "examples" / "llama3-70b.yaml")
LAYOUT = ["parallelism.tp=1,2,4,8", "parallelism.pp=1,2,4,8", "parallelism.vpp=1",
          "parallelism.tp_comm_overlap=0..1:0.01"]  # 16 x 101 = 1,616 per run length


def grid(configs: int) -> list[str]:
    runs = max(1, configs // 1616)
    return LAYOUT + [f"training.tokens=1e12..{runs}e12:1e12"]


def vectorized_full_model(engine, configs: int) -> float:
    """Every quantity of the model over arrays, chunk by chunk (the sweep's chunk size)."""
    import numpy as np

    from dlformula.sweep import CHUNK_SIZE

    model = engine.model
    evaluate, _ = model.functions(vectorized=True)
    base = engine.config(CONFIG, check_layout=False).values
    rng = np.random.default_rng(0)
    tp = rng.choice([1.0, 2, 4, 8], CHUNK_SIZE)
    pp = rng.choice([1.0, 2, 4, 8], CHUNK_SIZE)
    inputs = {k: np.float64(v) for k, v in base.items()}
    inputs.update(tp=tp, pp=pp, dp=512 / (tp * pp), vpp=np.float64(1),
                  tp_comm_overlap=rng.random(CHUNK_SIZE),
                  tokens=rng.uniform(1e12, 1e13, CHUNK_SIZE))
    out = evaluate(inputs)  # warm up
    assert len(out) == len(model.inputs) + len(model.constants) + len(model.order)
    del out
    chunks = max(1, configs // CHUNK_SIZE)
    start = time.perf_counter()
    for _ in range(chunks):
        evaluate(inputs)  # dropped, as a sweep drops each block's arrays
    seconds = time.perf_counter() - start
    return chunks * CHUNK_SIZE / seconds


def sweep_end_to_end(engine, configs: int) -> tuple[float, str]:
    from dlformula.sweep import sweep

    sweep(CONFIG, vary=grid(20000), engine=engine, top=20, sort="step_time")  # warm up
    start = time.perf_counter()
    t = sweep(CONFIG, vary=grid(configs), engine=engine, top=20, sort="step_time",
              where=["memory_per_gpu < 0.95 * hbm_capacity"])
    seconds = time.perf_counter() - start
    return t.stats.total / seconds, t.stats.summary()


def sweep_without_broadcasting(engine, configs: int) -> float:
    """The worst case for a grid: one axis every quantity depends on (the sequence length),
    so no quantity can be computed once for many configs."""
    from dlformula.sweep import sweep

    start = time.perf_counter()
    t = sweep(CONFIG, vary=[f"training.seq_len=1024..{1024 + configs - 1}"], engine=engine,
              top=20, sort="step_time")
    return t.stats.total / (time.perf_counter() - start)


def one_at_a_time(engine, configs: int) -> float:
    """`model.evaluate` on plain numbers, as `dlformula eval` runs it, a different config each
    time (the layouts cycle, so no result is reused)."""
    model = engine.model
    base = dict(engine.config(CONFIG, check_layout=False).values)
    layouts = [(tp, pp) for tp in (1, 2, 4, 8) for pp in (1, 2, 4, 8)]
    model.evaluate(base)
    start = time.perf_counter()
    for i in range(configs):
        tp, pp = layouts[i % len(layouts)]
        base.update(tp=tp, pp=pp, dp=512 // (tp * pp), tp_comm_overlap=(i % 101) / 100,
                    tokens=1e12 * (1 + i % 619))
        model.evaluate(base)
    return configs / (time.perf_counter() - start)


# ru_maxrss survives fork/exec (a child starts at its parent's high-water mark), so the child
# reads its own VmHWM from /proc where there is one.
_CHILD = """
import json, resource, sys, time

def peak_kib():
    try:
        for line in open('/proc/self/status'):
            if line.startswith('VmHWM:'):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

from dlformula import Engine
from dlformula.sweep import sweep
engine = Engine()
engine.model.functions(vectorized=True)
vary = json.loads(sys.argv[1])
base_rss = peak_kib()
start = time.perf_counter()
if vary:
    out = sys.argv[3] if len(sys.argv) > 3 else None
    t = sweep(sys.argv[2], vary=vary, engine=engine, top=20, sort="step_time", output=out)
    total = t.stats.total
else:
    total = 0
seconds = time.perf_counter() - start
print(json.dumps({"configs": total, "seconds": seconds, "base_kib": base_rss,
                  "peak_kib": peak_kib()}))
"""


def big_sweep(configs: int, csv: str | None = None) -> dict:
    """Peak RSS of a fresh process running the sweep, and of one that only loads the engine."""
    def child(vary: list[str], *extra: str) -> dict:
        out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(vary), CONFIG, *extra],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    idle = child([])
    run = child(grid(configs), *([csv] if csv else []))
    run["idle_peak_kib"] = idle["peak_kib"]
    return run


def scaling(configs: int) -> dict[str, float]:
    """Wall time of one sweep of `configs` configs on 1 and 2 worker processes (each run in a
    fresh interpreter, as the CLI runs), and the fixed costs per block and per task."""
    import numpy as np

    from dlformula import Engine
    from dlformula.parallel import run_tasks
    from dlformula.sweep import sweep

    vary = grid(configs)
    out: dict[str, float] = {}
    for workers in (1, 2):
        code = ("import sys, json, time; from dlformula import Engine; "
                "from dlformula.sweep import sweep; e = Engine(); "
                "e.model.functions(vectorized=True); t = time.perf_counter(); "
                "r = sweep(sys.argv[1], vary=json.loads(sys.argv[2]), engine=e, top=20, "
                "sort='step_time', where=['memory_per_gpu < 0.95 * hbm_capacity'], "
                "workers=int(sys.argv[3])); "
                "print(time.perf_counter() - t, r.stats.total)")
        res = subprocess.run([sys.executable, "-c", code, CONFIG, json.dumps(vary),
                              str(workers)], capture_output=True, text=True, check=True)
        seconds, total = res.stdout.split()
        out[f"workers={workers}"] = float(seconds)
        out["configs"] = float(total)
    engine = Engine()
    small = ["parallelism.tp=1,2,4,8", "training.tokens=1e12..500e12:1e12"]
    start = time.perf_counter()
    t = sweep(CONFIG, vary=small, engine=engine, chunk_size=1, top=5, sort="step_time")
    out["per block"] = (time.perf_counter() - start) / t.stats.total
    tasks = [np.zeros(1)] * 200
    list(run_tasks(_echo, None, tasks, 2))  # start-up of the pool not counted below
    start = time.perf_counter()
    list(run_tasks(_echo, None, tasks, 2))
    out["per task"] = (time.perf_counter() - start) / len(tasks)
    return out


def _echo(payload: object, task: object) -> object:
    return task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=2_000_000)
    ap.add_argument("--scalar", type=int, default=20_000)
    ap.add_argument("--big", type=int, default=10_000_000)
    ap.add_argument("--csv", metavar="PATH", help="also stream the big sweep's rows to PATH")
    ap.add_argument("--scaling", type=int, default=100_000_000,
                    help="configs of the 1-vs-2-worker sweep (0: skip)")
    args = ap.parse_args()

    from dlformula import Engine

    engine = Engine()
    model = engine.model
    print(f"model: {len(model.inputs)} inputs, {len(model.order)} quantities, "
          f"{len(model.constraints)} constraints; python {sys.version.split()[0]}")
    full = vectorized_full_model(engine, args.configs)
    rate, summary = sweep_end_to_end(engine, args.configs)
    flat = sweep_without_broadcasting(engine, min(args.configs, 1_000_000))
    scalar = one_at_a_time(engine, args.scalar)
    print(f"vectorized, full model (every quantity):  {full:>12,.0f} configs/s")
    print("sweep() end to end (constraints, pruned evaluation, --where, best 20 kept):")
    print(f"                                          {rate:>12,.0f} configs/s")
    print(f"   {summary}")
    print("sweep() over one axis every quantity depends on (no broadcasting gain):")
    print(f"                                          {flat:>12,.0f} configs/s")
    print(f"one config at a time (model.evaluate):    {scalar:>12,.0f} configs/s")
    print(f"ratio vectorized full model / one at a time: {full / scalar:,.0f}x; "
          f"sweep() / one at a time: {rate / scalar:,.0f}x")
    if args.big:
        big = big_sweep(args.big, args.csv)
        where = f", every row written to {args.csv}" if args.csv else ""
        print(f"{big['configs']:,}-config sweep in a fresh process{where}: "
              f"{big['seconds']:.1f} s "
              f"({big['configs'] / big['seconds']:,.0f} configs/s), peak RSS "
              f"{big['peak_kib'] / 1024:.0f} MiB; a process that only loaded the engine: "
              f"{big['idle_peak_kib'] / 1024:.0f} MiB (the sweep added "
              f"{(big['peak_kib'] - big['idle_peak_kib']) / 1024:.0f} MiB)")
    if args.scaling:
        sc = scaling(args.scaling)
        print(f"{sc['configs']:,.0f}-config sweep: 1 worker {sc['workers=1']:.2f} s, "
              f"2 workers {sc['workers=2']:.2f} s: {sc['workers=1'] / sc['workers=2']:.2f}x")
        print(f"fixed costs: {sc['per block'] * 1e6:.0f} us per block, "
              f"{sc['per task'] * 1e3:.2f} ms per task round trip to a worker process")
    print(f"(this process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}"
          " MiB)")


if __name__ == "__main__":
    main()
