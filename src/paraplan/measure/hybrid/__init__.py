"""Downscale, measure, upscale: project a cluster run from a real run of its own layers on local devices.

`plan` shrinks the target configuration until it fits the devices at hand and says what it cut; the layers
it times are `paraplan.measure.layers` (reference layers in plain PyTorch at one rank's shard shapes);
`bench` times them (forward, input- and weight-gradient backward, optimizer step) and `collectives` the
collectives among the local devices (`paraplan.measure.device`), both run as one local job (`job`, over
`paraplan.measure.processes`) and cached in SQLite (`cache`); `commfit` fits the network model to the
collectives; `upscale` hands the measured compute to the core projection, which restores the cut
communication, the DP/FSDP overlap and the full pipeline schedule at the target, and `straggler` adds the wait
for the slowest data-parallel rank. `api.hybrid_project` is the entry point (`paraplan project --hybrid`
prints it: `paraplan.cli.hybrid`); `realrun` and `validation` are the real 2-process CPU runs it is checked
against, training `paraplan.measure.reference`'s model.

Importing this package does not import torch; `bench` and `job` do, and the rest only inside the functions
that measure. `paraplan.measure.device.torch_available` says whether it can run.
"""
