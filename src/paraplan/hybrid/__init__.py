"""Downscale, measure, upscale: project a cluster run from a real run of its own layers on local devices.

`plan` shrinks the target configuration until it fits the devices at hand and says what it cut; `layers`
holds reference layers in plain PyTorch at one rank's shard shapes; `bench` times them (forward, input-
and weight-gradient backward, optimizer step) and `collectives` the collectives among the local devices,
both run as one local job (`job`, `spawn`) and cached in SQLite (`cache`); `commfit` fits the network
model to the collectives; `upscale` hands the measured compute to the core projection, which restores the
cut communication, the DP/FSDP overlap and the full pipeline schedule at the target, and `straggler` adds
the wait for the slowest data-parallel rank. `api.hybrid_project` is the entry point, `cli` the
`paraplan project --hybrid` output; `realrun` and `validation` are the real 2-process CPU runs it is
checked against.

Importing this package does not import torch; `layers`, `bench` and `job` do, and the rest only inside
the functions that measure.
"""

from __future__ import annotations

import importlib.util


def torch_available() -> bool:
    """Whether PyTorch can be imported (the `measure` extra), without importing it."""
    return importlib.util.find_spec("torch") is not None
