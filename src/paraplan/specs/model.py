"""Model architecture: what a transformer is made of, independent of how it is run.

Field names follow Megatron-core's `TransformerConfig` where one exists (`num_layers`, `hidden_size`,
`ffn_hidden_size`, `num_attention_heads`, `num_query_groups`, `kv_channels`, `moe_ffn_hidden_size`, ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from operator import attrgetter
from typing import Literal, get_args

from paraplan.errors import ConfigError, bound_problems, reject_unknown_names
from paraplan.specs.fieldtypes import coerce_fields

Activation = Literal["swiglu", "gelu", "squared_relu", "relu", "geglu"]
Norm = Literal["rmsnorm", "layernorm"]
Position = Literal["rope", "learned", "alibi", "none"]
SoftmaxType = Literal["vanilla", "off-by-one", "learnable"]

# Megatron-core's hybrid layer symbols (megatron-core 0.19.2, models/hybrid/hybrid_layer_allocation.py `Symbols`):
# one decoder block per character. paraplan models these four; Megatron also has G (Gated DeltaNet), D (DeepSeek
# sparse attention) and + (MLA), and "|" (pipeline stage boundaries, a training layout) and "/" (MTP patterns).
MAMBA, ATTENTION, MLP, MOE = "M", "*", "-", "E"
INF = float("inf")
MAX_LAYERS = 10_000
"""Most decoder layers accepted: the graph and the simulator walk each layer (the largest published models have
about 100-200; a larger count is a typo that would make the tool work for minutes before anything is said)."""
PATTERN_SYMBOLS = (MAMBA, ATTENTION, MLP, MOE)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer. Dense, GQA/MQA, MoE and MLA variants are all this one type."""

    name: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    """FFN width of a dense layer (for all-MoE models, the width a dense layer would have)."""
    num_attention_heads: int
    vocab_size: int
    num_query_groups: int | None = None
    """KV heads (GQA/MQA). None means multi-head attention (= num_attention_heads)."""
    kv_channels: int | None = None
    """Head dim. None means hidden_size // num_attention_heads (Qwen3 sets it explicitly)."""
    activation: Activation = "swiglu"
    norm: Norm = "rmsnorm"
    position: Position = "rope"
    tied_embeddings: bool = False
    attention_bias: bool = False
    dropout: bool = False
    """GPT-style dropout after attention and MLP (saves 1-byte masks: Korthikanti et al. 2022)."""
    # --- mixture of experts ---
    num_experts: int = 0
    moe_ffn_hidden_size: int | None = None
    moe_router_topk: int = 0
    moe_shared_expert_intermediate_size: int = 0
    """Total width of the shared expert(s) (DeepSeek: n_shared_experts x moe_intermediate_size)."""
    moe_first_k_dense: int = 0
    """The first k layers are dense (DeepSeek `first_k_dense_replace`)."""
    moe_layer_freq: int = 1
    """Every n-th layer (after the dense prefix) is MoE (`moe_layer_freq`, `decoder_sparse_step`)."""
    # --- multi-head latent attention (DeepSeek-V2/V3) ---
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # --- DeepSeek sparse attention over MLA (DeepSeek-V3.2); Megatron-core 0.19.2 `dsa_indexer_*` names ---
    dsa_indexer_n_heads: int = 0
    """Heads of the lightning indexer that picks each query's keys (V3.2: 64). 0: dense attention."""
    dsa_indexer_head_dim: int = 128
    dsa_indexer_topk: int = 2048
    """Keys each query attends to (V3.2: 2048)."""
    # --- multi-token prediction (DeepSeek-V3) ---
    mtp_num_layers: int = 0
    # --- hybrid models (Nemotron-H, Nemotron 3): Megatron-core `hybrid_layer_pattern` ---
    hybrid_layer_pattern: str | None = None
    """One decoder block per character (Megatron's `--hybrid-override-pattern`, now `hybrid_layer_pattern`): M a
    Mamba-2 mixer, * self-attention, - a dense MLP, E an MoE MLP, each with its own pre-norm and residual. None: every
    layer is attention + MLP (or MoE). When set, `num_layers` is its length."""
    # --- Mamba-2 mixer (Dao & Gu 2024); defaults are Megatron-core's (0.19.2 TransformerConfig, MambaMixer) ---
    mamba_state_dim: int = 128
    """SSM state size N per head (`mamba_state_dim`, HF `ssm_state_size`)."""
    mamba_head_dim: int = 64
    """Head dim P (`mamba_head_dim`)."""
    mamba_num_groups: int = 8
    """Groups G sharing B and C (`mamba_num_groups`, HF `n_groups`)."""
    mamba_num_heads: int | None = None
    """Heads H (`mamba_num_heads`). None: d_inner / head dim with d_inner = 2 x hidden (MambaMixer's expand=2)."""
    mamba_conv_kernel: int = 4
    """Causal conv1d width (MambaMixer `d_conv=4`, HF `conv_kernel`)."""
    # --- Gated DeltaNet linear attention (Yang et al. 2024), interleaved with full attention (Qwen3-Next) ---
    linear_attention_freq: int = 0
    """Every n-th layer is full attention, the others Gated DeltaNet: layer i (0-based) is full attention when
    (i + 1) % n == 0 (Megatron `linear_attention_freq` with `experimental_attention_variant=gated_delta_net`,
    megatron-core 0.19.2; HF `full_attention_interval`). 0: no linear attention."""
    linear_conv_kernel_dim: int = 4
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    """Gated DeltaNet shapes (Megatron `linear_*`, HF the same names); defaults are megatron-core 0.19.2's."""
    # --- chunked local attention with periodic global layers (Llama 4) ---
    attention_chunk_size: int = 0
    """Layers with RoPE attend only within chunks of this many tokens (Llama 4: 8192; HF and Megatron-Bridge
    `attention_chunk_size`). 0: full attention in every layer."""
    nope_layer_interval: int = 0
    """Every n-th layer, (i + 1) % n == 0, has no RoPE and attends globally (HF `no_rope_layer_interval`,
    Megatron-Bridge `nope_layer_interval`); with `attention_chunk_size` the others are chunked. 0: none."""
    window_size: int = 0
    """Sliding-window attention: each query attends to itself and the `window_size` keys before it (Megatron-core
    `window_size` (left, 0), its left entry; HF `sliding_window` counts the query's own key too, so it is
    `window_size + 1`: gpt-oss's 128 is Megatron-Bridge's (127, 0)). 0: none."""
    window_attn_skip_freq: int = 0
    """With `window_size`: every n-th layer, (i + 1) % n == 0, attends globally (Megatron `window_attn_skip_freq`). 0:
    every layer slides."""
    softmax_type: SoftmaxType = "vanilla"
    """Attention softmax (megatron-core 0.16.1 TransformerConfig `softmax_type`): "learnable" adds a learned
    per-head sink logit to the denominator (gpt-oss's attention sinks), "off-by-one" a constant 1; one scalar per
    head, no change to the kernels' work."""
    attention_output_gate: bool = False
    """Full attention gated by sigmoid(x W_g) before its output projection (Qwen3-Next; Megatron
    `attention_output_gate`): the QKV projection also produces the gate, heads x head dim wide."""
    # --- GPT-OSS's numerics (megatron-core 0.16 TransformerConfig names; HF gpt_oss config in brackets) ---
    yarn_rotary_scaling_factor: float = 0.0
    """YaRN RoPE scaling factor (`yarn_rotary_scaling_factor`; HF `rope_scaling.factor`; gpt-oss: 32). With
    `yarn_mscale` unset (gpt-oss), megatron-core multiplies cos and sin by the concentration factor
    0.1 ln(factor) + 1 (`_yarn_get_concentration_factor`; `rope_concentration`). 0: plain RoPE."""
    activation_func_clamp_value: float = 0.0
    """The gated MLP's gate half is clamped to at most this value and its linear half to +-this value before the
    activation (`activation_func_clamp_value`; HF `swiglu_limit`; gpt-oss: 7.0). 0: no clamp."""
    moe_expert_linear_bias: bool = False
    """The routed experts' linear layers have biases (gpt-oss: megatron `add_bias_linear`; HF GptOssExperts
    `gate_up_proj_bias`, `down_proj_bias`)."""
    source: str = ""

    def __post_init__(self) -> None:
        problems = self._value_problems()
        if problems:  # the shape rules below compare these values
            raise ConfigError(problems)
        if self.linear_attention_freq < 0:
            problems.append(f"linear_attention_freq must be >= 0 (got {self.linear_attention_freq})")
        if self.dsa_indexer_n_heads and self.kv_lora_rank is None:
            problems.append("DeepSeek sparse attention (dsa_indexer_n_heads) runs over MLA: set kv_lora_rank")
        if sum(map(bool, (self.attention_chunk_size, self.window_size, self.linear_attention_freq))) > 1:
            problems.append("chunked, sliding-window and Gated DeltaNet layers together are not modelled: give one")
        pattern = self.hybrid_layer_pattern
        if pattern is not None:
            if self.linear_attention_freq:
                problems.append("a hybrid layer pattern and linear_attention_freq both set the mixers: give one")
            unknown = sorted(set(pattern) - set(PATTERN_SYMBOLS))
            if unknown:
                problems.append(
                    f"hybrid layer pattern symbols {unknown} are not modelled: paraplan knows "
                    f"{', '.join(PATTERN_SYMBOLS)} (M Mamba-2, * attention, - MLP, E MoE); give pipeline stages as "
                    "a pipeline layout, not '|'"
                )
            if len(pattern) != self.num_layers:
                problems.append(f"hybrid layer pattern has {len(pattern)} layers, num_layers is {self.num_layers}")
            if MOE in pattern and self.num_experts <= 0:
                problems.append("hybrid layer pattern has MoE layers (E) but the model has no experts")
        if problems:
            raise ConfigError(problems)

    def _value_problems(self) -> list[str]:
        """Sizes that must be positive (each is a divisor somewhere), and the layer count the tool walks."""
        given = (
            ("num_query_groups", self.num_query_groups),
            ("kv_channels", self.kv_channels),
            ("moe_ffn_hidden_size", self.moe_ffn_hidden_size),
        )
        optional = [(name, value, 1, INF) for name, value in given if value is not None]
        problems = bound_problems(
            [
                ("num_layers", self.num_layers, 1, MAX_LAYERS),
                ("hidden_size", self.hidden_size, 1, INF),
                ("ffn_hidden_size", self.ffn_hidden_size, 1, INF),
                ("num_attention_heads", self.num_attention_heads, 1, INF),
                ("vocab_size", self.vocab_size, 1, INF),
                ("num_experts", self.num_experts, 0, INF),
                ("moe_router_topk", self.moe_router_topk, 0, INF),
                ("moe_layer_freq", self.moe_layer_freq, 1, INF),
                ("moe_first_k_dense", self.moe_first_k_dense, 0, INF),
                ("mtp_num_layers", self.mtp_num_layers, 0, MAX_LAYERS),
                ("window_size", self.window_size, 0, INF),
                ("window_attn_skip_freq", self.window_attn_skip_freq, 0, INF),
                ("attention_chunk_size", self.attention_chunk_size, 0, INF),
                ("nope_layer_interval", self.nope_layer_interval, 0, INF),
                ("yarn_rotary_scaling_factor", self.yarn_rotary_scaling_factor, 0, INF),
                ("activation_func_clamp_value", self.activation_func_clamp_value, 0, INF),
                *optional,
            ],
            "model",
        )
        if self.softmax_type not in get_args(SoftmaxType):
            problems.append(
                f"model softmax_type '{self.softmax_type}' must be one of {', '.join(get_args(SoftmaxType))}"
            )
        if not problems and self.num_experts > 0 and not 1 <= self.moe_router_topk <= self.num_experts:
            problems.append(
                f"model moe_router_topk {self.moe_router_topk} must be between 1 and the {self.num_experts} experts"
            )
        return problems

    # ------------------------------------------------------------------ derived
    @property
    def kv_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def rope_concentration(self) -> float:
        """The factor megatron-core's YaRN multiplies cos and sin by (megatron-core 0.16
        yarn_rotary_pos_embedding.py `_yarn_get_mscale` with `yarn_mscale` unset): 0.1 ln(factor) + 1; 1 without
        YaRN scaling (factor <= 1)."""
        factor = self.yarn_rotary_scaling_factor
        return 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def gated_mlp(self) -> bool:
        return self.activation in ("swiglu", "geglu")

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn_hidden_size

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def v_dim(self) -> int:
        return self.v_head_dim if self.is_mla else self.head_dim

    @property
    def is_hybrid(self) -> bool:
        """Decoder blocks follow `hybrid_layer_pattern` (one mixer or MLP per block)."""
        return self.hybrid_layer_pattern is not None

    def layer_symbol(self, index: int) -> str | None:
        """The hybrid pattern's symbol of decoder block `index` (0-based); None for a plain transformer."""
        return None if self.hybrid_layer_pattern is None else self.hybrid_layer_pattern[index]

    def pattern_count(self, symbol: str) -> int:
        return 0 if self.hybrid_layer_pattern is None else self.hybrid_layer_pattern.count(symbol)

    @property
    def has_mamba(self) -> bool:
        return self.pattern_count(MAMBA) > 0

    @property
    def mamba_heads(self) -> int:
        return self.mamba_num_heads or 2 * self.hidden_size // self.mamba_head_dim

    @property
    def mamba_inner(self) -> int:
        """d_inner = heads x head dim (MambaMixer)."""
        return self.mamba_heads * self.mamba_head_dim

    @property
    def has_unequal_mixers(self) -> bool:
        """Decoder layers of different mixers (a hybrid pattern, or Gated DeltaNet among full attention): their work
        differs, so pipeline splits balance work rather than layer counts (`graph.balance`)."""
        return self.is_hybrid or self.linear_attention_freq > 0 or self.attention_chunk_size > 0 or self.window_size > 0

    def mixer_of(self, index: int) -> str:
        """How decoder layer `index` (0-based) mixes tokens: "gdn" (Gated DeltaNet), "local" (chunked or
        sliding-window attention), or "attention"; a hybrid pattern's blocks are named by `layer_symbol`."""
        if self.is_linear_attention_layer(index):
            return "gdn"
        if self.is_local_attention_layer(index):
            return "local"
        return "attention"

    def is_local_attention_layer(self, index: int) -> bool:
        """Chunked (`attention_chunk_size`, all but every `nope_layer_interval`-th layer) or sliding-window
        (`window_size`, all but every `window_attn_skip_freq`-th layer) attention in layer `index`."""
        if self.attention_chunk_size > 0:
            every = self.nope_layer_interval
        elif self.window_size > 0:
            every = self.window_attn_skip_freq
        else:
            return False
        return every <= 0 or (index + 1) % every != 0

    def is_linear_attention_layer(self, index: int) -> bool:
        """Whether decoder layer `index` (0-based) mixes tokens with Gated DeltaNet instead of full attention."""
        return self.linear_attention_freq > 0 and (index + 1) % self.linear_attention_freq != 0

    def is_moe_layer(self, index: int) -> bool:
        """Whether decoder layer `index` (0-based) is an MoE layer (an E block of a hybrid pattern)."""
        if self.hybrid_layer_pattern is not None:
            return self.hybrid_layer_pattern[index] == MOE
        if not self.is_moe or index < self.moe_first_k_dense:
            return False
        return (index - self.moe_first_k_dense) % self.moe_layer_freq == 0

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))

    def with_overrides(self, **values: object) -> ModelSpec:
        """Replace fields by name; None values are ignored; an unknown name is a ConfigError."""
        reject_unknown_names(values, MODEL_FIELD_NAMES, "model field")
        typed, problems = coerce_fields(ModelSpec, {k: v for k, v in values.items() if v is not None}, "model field")
        if problems:
            raise ConfigError(problems)
        return replace(self, **typed)

    def __hash__(self) -> int:
        """The dataclass's hash (of every field, in order), computed once per model (`_HASHES`)."""
        found = _HASHES.get(id(self))
        if found is not None and found[0] is self:
            return found[1]
        value = hash(_field_values(self))
        if len(_HASHES) >= _HASHES_KEPT:
            _HASHES.clear()
        _HASHES[id(self)] = (self, value)
        return value


MODEL_FIELD_NAMES: frozenset[str] = frozenset(f.name for f in fields(ModelSpec))
_field_values = attrgetter(*(f.name for f in fields(ModelSpec)))  # the tuple the dataclass's hash hashes
_HASHES: dict[int, tuple[ModelSpec, int]] = {}
"""Each model's hash by its id, the model held (so its id stays its own): the core's caches are keyed by the model
and look it up tens of times per projection, and hashing its fields costs about 1.4 us (issue 35)."""
_HASHES_KEPT = 4096
