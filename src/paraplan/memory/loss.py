"""The loss's transient on the stage that holds the LM head: what the cross-entropy allocates beyond what it saves
for backward (`graph.layers.head_ops` counts those: the fp32 softmax or log-probabilities, 4 bytes per logit, or the
16-bit logits, `graph.layers.loss_saved_logit_bytes`).

The implementations differ:
- Megatron-core's vocab-parallel cross-entropy (`tensor_parallel/cross_entropy.py`): the 16-bit logits stay
  alive while `.float()` makes the fp32 copy, which `exp` and the divide overwrite in place into the saved
  softmax; backward writes the gradient into that softmax in place and casts it to 16 bits. 2 bytes per logit
  beyond the saved 4 (the 16-bit logits in forward, the 16-bit gradient in backward). The fused kernel
  (`--cross-entropy-loss-fusion`) keeps the same buffers.
- torch's `F.cross_entropy` (log_softmax + nll_loss) over fp32 logits, as torchtitan runs it (torchtitan
  `Transformer.forward` returns `self.output(h).float()`, `train.py` `loss_fn` calls `F.cross_entropy`): backward
  allocates the dense fp32 gradient of the log-probabilities (nll_loss backward) and of the logits (log_softmax
  backward) beside the saved fp32 log-probabilities: 8 bytes per logit beyond the 4.
- torchtitan under tensor parallelism runs that loss inside torch's `loss_parallel()` (on unless
  `disable_loss_parallel`, torchtitan@9dec370 parallel_dims.py `loss_parallel_enabled` / train.py
  `train_context`): the vocab-sharded DTensor path (torch/distributed/tensor/parallel/loss.py) fuses nll_loss and
  log_softmax backward into `_nll_loss_and_log_softmax_backward`, which returns `(grad_input + torch.exp(x)) *
  grad_output` with `x` the saved fp32 log-probabilities and `grad_input` a dense `zeros_like(x)` still held by its
  local name: the zeros, `exp(x)` and their sum are live at once, 12 bytes per logit beyond the saved 4 (its
  forward, `_log_softmax`, peaks lower: the fp32 logits, `shifted` and `exp(shifted)`). Measured on CPU (torch 2.13,
  one gloo rank, peak resident bytes over 32M logits): 12.0 bytes per logit in all for F.cross_entropy, 16.0 under
  `loss_parallel()`.
- llm-foundry's default loss, flash-attn's fused CrossEntropyLoss over the 16-bit logits (`graph.layers.
  SIXTEEN_BIT_LOSS_FRAMEWORKS`), saves those logits and writes their gradient into a new tensor of their dtype
  (flash-attn 2.5.7 ops/triton/cross_entropy.py `dlogits = torch.empty_like(logits)`, `inplace_backward` off in
  llm-foundry): 2 bytes per logit beyond the saved 2. Composer holds the previous micro-batch's logits in
  `state.outputs` until the next forward returns (mosaicml 0.21 `Trainer._train_microbatch`: `self.state.outputs =
  self.state.model(self.state.batch)`), as many bytes at the end of that forward: the same 2 per logit.
"""

from __future__ import annotations

from paraplan.graph.layers import loss_keeps_16bit_logits, torch_loss_parallel
from paraplan.specs.training import TrainingSpec

MEGATRON_LOSS_EXTRA_BYTES = 2.0
FUSED_16BIT_LOSS_EXTRA_BYTES = 2.0
TORCH_LOSS_EXTRA_BYTES = 8.0
TORCH_LOSS_PARALLEL_EXTRA_BYTES = 12.0
TORCH_LOSS_FRAMEWORKS = frozenset({"torchtitan"})


def loss_extra_bytes_per_logit(train: TrainingSpec) -> float:
    """Bytes per logit element the loss holds at its peak beyond the tensor it saves."""
    if loss_keeps_16bit_logits(train):
        # one fused backward kernel writes the 16-bit gradient of the saved 16-bit logits
        return FUSED_16BIT_LOSS_EXTRA_BYTES
    if train.framework not in TORCH_LOSS_FRAMEWORKS:
        return MEGATRON_LOSS_EXTRA_BYTES
    return TORCH_LOSS_PARALLEL_EXTRA_BYTES if torch_loss_parallel(train) else TORCH_LOSS_EXTRA_BYTES
