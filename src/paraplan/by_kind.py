"""The step broken down by layer kind: what each kind of block (Mamba-2, attention, MLP, MoE, Gated DeltaNet, the
embedding and the head) costs one GPU per micro-batch, and its share of the model's compute.

The same block costs the projection adds up (`cost.block.block_cost` under the projection's block context); here they
stay apart by kind, for a model whose layers differ.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.block import block_cost
from paraplan.cost.calibration import at_scale, calibration_for
from paraplan.graph import kinds as K
from paraplan.graph import layers as L
from paraplan.memory.activations import recompute_mode
from paraplan.projection import block_context
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check


@dataclass(frozen=True, slots=True)
class KindCost:
    """One layer kind: its blocks in the model and what one of them costs one GPU for one micro-batch."""

    kind: str
    blocks: int
    forward_s: float
    backward_s: float  # input and weight gradients, recompute included
    forward_tflop: float  # model FLOPs of the forward on this GPU
    params: int  # parameters of one block on this GPU (dense and expert)
    saved_bytes: float  # activations one block keeps per in-flight micro-batch
    compute_share: float  # blocks x (forward + backward) over the same sum for every kind


def kind_costs(model: ModelSpec, system: SystemSpec, train: TrainingSpec) -> tuple[KindCost, ...]:
    train = check(model, system, train)
    cal = at_scale(calibration_for(system.gpu.name, train.framework), system.num_gpus)
    ctx = block_context(system, train, cal)
    shard = L.Shard.of(train)
    layer_input = shard.act_bytes * shard.tokens * model.hidden_size / shard.sp_div
    rows = []
    for name, blocks in K.block_counts(model).items():
        kind = K.layer_kind(name)
        # Megatron's named modules (`recompute_mode`); torchtitan's per-op policy is shown as before, as selective
        mode = recompute_mode(train) if train.recompute_modules is not None else train.recompute_granularity
        recompute = mode if kind.is_decoder_layer else "none"
        cost = block_cost(kind.ops(model, shard), recompute, ctx, layer_input)
        table = kind.params_of(model, shard)
        params = table if table is not None else cost.dense_params + cost.expert_params
        rows.append((name, blocks, cost, params))
    total = sum(n * (c.forward_s + c.backward_input_s + c.backward_weight_s) for _, n, c, _ in rows) or 1.0
    return tuple(
        KindCost(
            kind=name,
            blocks=n,
            forward_s=c.forward_s,
            backward_s=c.backward_input_s + c.backward_weight_s,
            forward_tflop=c.forward_flops / 1e12,
            params=int(params),
            saved_bytes=c.saved_bytes,
            compute_share=n * (c.forward_s + c.backward_input_s + c.backward_weight_s) / total,
        )
        for name, n, c, params in rows
    )
