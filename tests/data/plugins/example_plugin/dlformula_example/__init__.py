"""Example dlformula plugin: a made-up accelerator, one formula, one function, one command.

Installed (`pip install .`), it is found through the `dlformula` entry point in pyproject.toml;
as a folder, `dlformula --plugin path/to/dlformula_example ...` loads the same hooks.
"""

from __future__ import annotations

import math
from importlib import resources

import click

from dlformula.hookspecs import Function, hookimpl

HERE = resources.files(__name__)


@hookimpl
def formula_folders():
    return [HERE / "formulas"]


@hookimpl
def hardware_folders():
    return [HERE / "hardware"]


@hookimpl
def config_keys():
    # A new config key, and so a new input, without a formula file.
    return {
        "example.allocation_granularity": {
            "unit": "byte", "default": 2097152, "domain": "number > 0",
            "doc": "Block size the memory allocator rounds large allocations up to.",
            "source": "PyTorch CUDA caching allocator (large allocations are rounded to 2 MiB)",
        },
    }


def _round_up_to(x, multiple):
    return math.ceil(x / multiple) * multiple


def _round_up_to_array(x, multiple):
    import numpy as np

    return np.ceil(x / multiple) * multiple


@hookimpl
def functions():
    return [Function("round_up_to", python=_round_up_to, numpy=_round_up_to_array,
                     excel="CEILING", args=2, dims="same",
                     doc="x rounded up to a whole multiple of m (same unit)")]


@hookimpl
def register_commands(cli):
    @cli.command("rounded-memory")
    @click.argument("config", type=click.Path(dir_okay=False))
    def rounded_memory(config):
        """Peak memory per GPU of CONFIG in whole allocator blocks."""
        from dlformula import Engine

        result = Engine().evaluate(config)
        blocks = result["memory_per_gpu_rounded"] / result["allocation_granularity"]
        click.echo(f"{result['memory_per_gpu_rounded'] / 2**30:.2f} GiB ({blocks:.0f} blocks)")
