"""Running a sweep's blocks (or a search's layouts) on several processes or a Dask cluster.

A task is a range of blocks; the payload -- the compiled model (marshal bytes and the plugin
functions it calls) and the sweep's plan -- goes to each worker once: to local processes as
they start, to Dask workers by `Client.scatter(broadcast=True)`. Each task reduces on its
worker -- the rows kept, the best K of them, the counts -- so only results travel back, and
they are taken in task order, so the rows, counts and their order are those one process gives.

Local processes are forked where the platform allows (Linux: nothing is pickled, the workers
start in milliseconds) and spawned elsewhere. A Dask worker needs the same Python (the model's
code object is marshal data) and dlformula, with any plugin whose functions the formulas call
importable there. `pip install 'dlformula[dask]'` installs the client.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

CONNECT_TIMEOUT = 10  # seconds to reach a Dask scheduler
PARALLEL_MIN = 4_000_000  # configs below which extra processes cost more than they save
TASK_CONFIGS = 2_000_000  # configs per task, so workers stay busy and results stay small

_PAYLOAD: list[Any] = []  # in a worker: the payload of the current run
_MODELS: dict[str, Any] = {}  # in a worker: models by digest, unpacked once


def local_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def workers_for(workers: int | None, scheduler: Any, total: int) -> int:
    """Processes to use: as asked; by default every core for a large grid, one otherwise."""
    if scheduler is not None:
        return max(int(workers or 1), 1)
    if workers is None:
        return local_cores() if total >= PARALLEL_MIN else 1
    if workers < 1:
        from .errors import UsageError

        raise UsageError(f"--workers {workers}: give 1 or more processes")
    return workers


def task_ranges(count: int, per_block: int, workers: int) -> list[tuple[int, int]]:
    """Consecutive ranges of `count` blocks: about TASK_CONFIGS configs each, and at least four
    per worker so that a slow task does not leave the others idle."""
    size = max(1, min(TASK_CONFIGS // max(per_block, 1), -(-count // (4 * max(workers, 1)))))
    return [(lo, min(count, lo + size)) for lo in range(0, count, size)]


def model_spec(model: Any) -> tuple[str, bytes, dict[str, Any]]:
    """What a worker needs to rebuild the model: its digest, marshal bytes, plugin functions.
    The model itself is remembered here too, so a forked worker uses it as it is, with the
    functions this process has already compiled."""
    _MODELS[model.digest] = model
    return model.digest, model.pack(), dict(model.plugin_functions)


def model_of(spec: tuple[str, bytes, dict[str, Any]]) -> Any:
    """The model in a worker (unpacked once per digest)."""
    digest, data, functions = spec
    model = _MODELS.get(digest)
    if model is None:
        from .model import CompiledModel

        model = _MODELS[digest] = CompiledModel.unpack(data)
        if functions:
            model.bind_functions(functions)
    return model


def run_tasks(fn: Callable[[Any, Any], Any], payload: Any, tasks: list[Any],
              workers: int, scheduler: Any = None) -> Iterator[Any]:
    """`fn(payload, task)` for every task, on `workers` local processes or the Dask cluster at
    `scheduler` (an address or a `distributed.Client`); results in task order."""
    if scheduler is not None:
        yield from _on_dask(fn, payload, tasks, scheduler)
        return
    if workers <= 1 or len(tasks) <= 1:
        for task in tasks:
            yield fn(payload, task)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)),
                             mp_context=multiprocessing.get_context(method),
                             initializer=_install, initargs=(payload,)) as pool:
        yield from _windowed(lambda t: pool.submit(_call, fn, t), tasks, 2 * workers)


def _windowed(submit: Callable[[Any], Any], tasks: list[Any], window: int) -> Iterator[Any]:
    """Results in task order, with at most `window` tasks submitted and not yet taken (rows
    streamed to a slow file do not pile up in memory)."""
    futures = [submit(t) for t in tasks[:window]]
    for i in range(len(tasks)):
        if i + window < len(tasks):
            futures.append(submit(tasks[i + window]))
        yield futures[i].result()
        futures[i] = None  # a result is not held once taken


def _install(payload: Any) -> None:
    _PAYLOAD[:] = [payload]


def _call(fn: Callable[[Any, Any], Any], task: Any) -> Any:
    return fn(_PAYLOAD[0], task)


def _on_dask(fn: Callable[[Any, Any], Any], payload: Any, tasks: list[Any],
             scheduler: Any) -> Iterator[Any]:
    try:
        from distributed import Client
    except ImportError:
        from .errors import UsageError

        raise UsageError("--scheduler needs Dask's distributed client, which is not installed; "
                         "pip install 'dlformula[dask]'") from None
    own = not isinstance(scheduler, Client)
    try:
        client = Client(scheduler, timeout=CONNECT_TIMEOUT) if own else scheduler
    except OSError as exc:
        from .errors import UsageError

        raise UsageError(f"--scheduler {scheduler}: cannot reach the Dask scheduler ({exc}); "
                         "give its address, e.g. tcp://10.0.0.1:8786") from None
    try:
        shared = client.scatter(payload, broadcast=True)
        window = max(4, 2 * len(client.scheduler_info().get("workers", {})))
        yield from _windowed(lambda t: client.submit(fn, shared, t, pure=False), tasks, window)
    finally:
        if own:
            client.close()
