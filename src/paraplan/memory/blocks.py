"""What one block of operators (a layer, the embedding, the head) leaves on a GPU for one micro-batch: its
parameters, split into those replicated over data parallelism and the experts' (replicated over expert data
parallelism), and the activations it saves for backward under a recompute mode (`memory.activations`).

The cost model (`cost.block.block_cost`) and the tuner's memory pre-filter both read these figures from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paraplan.graph.backward import is_weightless_gemm
from paraplan.graph.ops import Op, OpKind
from paraplan.memory.activations import op_policy_recompute_bytes, saved_bytes


@dataclass(frozen=True, slots=True)
class BlockMemory:
    dense_params: int
    """Parameters on this GPU, replicated over DP."""
    expert_params: int
    """Expert parameters on this GPU, replicated over expert DP."""
    saved_bytes: float
    """Activations kept per in-flight micro-batch under the block's recompute mode."""
    full_saved_bytes: float
    """What it would keep without recompute (the working set while recomputing)."""
    loss_logits: float = 0.0
    """Logit elements its largest cross-entropy works over (the output of the head's or an MTP module's LM head GEMM;
    `memory.loss`)."""
    backward_transient_bytes: float = 0.0
    """The gradients live at once in its backward beyond the saved tensors (`backward_transient_bytes`)."""
    op_recompute_bytes: float = 0.0
    """Under torchtitan's per-op SAC ("op"), the working set while it recomputes beyond `saved_bytes`
    (`memory.activations.op_policy_recompute_bytes`); 0 under the other modes."""


def weight_params(op: Op) -> int:
    if op.kind is not OpKind.GEMM or op.gemm is None or is_weightless_gemm(op):
        return 0
    return op.gemm.k * op.gemm.n * op.gemm.count


def backward_transient_bytes(forward: Sequence[Op], act_bytes: float = 2.0) -> float:
    """The largest pair of activation gradients one backward step holds beside the saved tensors: a matmul's
    backward (a weight GEMM or attention's scores and context products) takes the gradient of its output and
    writes that of its input, and autograd frees the output's gradient only when the node returns (torch
    autograd engine: a node's inputs are released after its `apply`). The 16-bit gradients of an (m x k) @ (k x n)
    product: m x (n + k) elements per instance. Megatron's and TransformerEngine's fused scale-mask-softmax write
    their input gradient over the output gradient (`scaled_masked_softmax_cuda.backward`: "in-place"), so under
    unfused attention the score-sized pair is the context product's: the probabilities' gradient and the
    context's. Weight gradients go to the gradient buffers (`gradients`), not counted here."""
    worst = 0.0
    for op in forward:
        if op.kind is OpKind.GEMM and op.gemm is not None:
            g = op.gemm
            worst = max(worst, act_bytes * g.count * g.m * (g.n + g.k))
    return worst


def block_memory(
    forward: Sequence[Op], recompute: str, layer_input_bytes: float, act_bytes: float = 2.0, compiled: bool = False
) -> BlockMemory:
    """`recompute`: "none", "selective", "full" (only the block input, `layer_input_bytes`, is kept) or "op"
    (torchtitan's per-op policy, which keeps some outputs of `act_bytes` per element; `memory.activations`).
    `compiled`: the block under torch.compile (`memory.activations.op_policy_saved_bytes`)."""
    losses = [op.gemm.m * op.gemm.n for op in forward if op.name.endswith("lm_head") and op.gemm is not None]
    dense_params = expert_params = 0
    for op in forward:
        n = weight_params(op)
        if op.expert:
            expert_params += n
        else:
            dense_params += n
    return BlockMemory(
        dense_params=dense_params,
        expert_params=expert_params,
        saved_bytes=saved_bytes(forward, recompute, layer_input_bytes, act_bytes, compiled),
        full_saved_bytes=sum(op.saved_bytes for op in forward),
        loss_logits=max(losses, default=0.0),
        backward_transient_bytes=backward_transient_bytes(forward, act_bytes),
        op_recompute_bytes=(
            op_policy_recompute_bytes(forward, layer_input_bytes, act_bytes, compiled) if recompute == "op" else 0.0
        ),
    )
