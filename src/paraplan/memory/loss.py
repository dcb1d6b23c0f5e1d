"""The loss's transient on the stage that holds the LM head: what the cross-entropy allocates beyond the fp32
softmax (or log-probabilities) it saves for backward (`graph.layers.head_ops` counts those 4 bytes per logit).

The two implementations differ by a factor of four:
- Megatron-core's vocab-parallel cross-entropy (`tensor_parallel/cross_entropy.py`): the 16-bit logits stay
  alive while `.float()` makes the fp32 copy, which `exp` and the divide overwrite in place into the saved
  softmax; backward writes the gradient into that softmax in place and casts it to 16 bits. 2 bytes per logit
  beyond the saved 4 (the 16-bit logits in forward, the 16-bit gradient in backward). The fused kernel
  (`--cross-entropy-loss-fusion`) keeps the same buffers.
- torch's `F.cross_entropy` (log_softmax + nll_loss) over fp32 logits, as torchtitan runs it (torchtitan
  `Transformer.forward` returns `self.output(h).float()`, `train.py` `loss_fn` calls `F.cross_entropy`) and
  llm-foundry: backward allocates the dense fp32 gradient of the log-probabilities (nll_loss backward) and of
  the logits (log_softmax backward) beside the saved fp32 log-probabilities: 8 bytes per logit beyond the 4.
"""

from __future__ import annotations

from paraplan.specs.training import TrainingSpec

MEGATRON_LOSS_EXTRA_BYTES = 2.0
TORCH_LOSS_EXTRA_BYTES = 8.0
TORCH_LOSS_FRAMEWORKS = frozenset({"torchtitan", "llm-foundry"})


def loss_extra_bytes_per_logit(train: TrainingSpec) -> float:
    """Bytes per logit element the loss holds at its peak beyond the fp32 tensor it saves."""
    return TORCH_LOSS_EXTRA_BYTES if train.framework in TORCH_LOSS_FRAMEWORKS else MEGATRON_LOSS_EXTRA_BYTES
