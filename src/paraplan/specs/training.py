"""How the model is trained: parallel layout, batch, recompute, sharding, overlap, precision, schedule.

Field names are Megatron-core's (`tensor_model_parallel_size`, ...); `ALIASES` maps the short names
users type (`tp pp vpp cp ep etp dp mbs gbs seq`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from operator import attrgetter
from typing import Literal

from paraplan.errors import ConfigError, reject_unknown_names
from paraplan.fastinit import fastinit
from paraplan.specs.fieldtypes import coerce_fields
from paraplan.specs.schedule import DEFAULT_SCHEDULE, SCHEDULES, PipelineSchedule
from paraplan.specs.schedule import schedule as schedule_named

Recompute = Literal["none", "selective", "full"]
Dispatcher = Literal["alltoall", "flex"]

PRECISIONS = ("fp16", "bf16", "fp8", "fp8_cs", "fp8_blockwise", "mxfp8", "nvfp4")
"""Mixed-precision training: 16-bit activations, GEMMs in the named precision (what the tuner searches)."""
LOW_PRECISIONS = ("fp8", "fp8_cs", "fp8_blockwise", "mxfp8", "nvfp4")
"""The precisions whose GEMMs run quantised (FP8 and FP4 recipes, `paraplan.cost.quantize`)."""
TRAINING_PRECISIONS = (*PRECISIONS, "fp32")
"""Every precision a projection accepts: also plain fp32 training (fp32 weights, gradients, Adam states and
activations; CPU reference runs, `paraplan.measure.e2e`). fp32 math is costed on the GpuSpec's `fp16_tflops`
(`specs.system.PRECISION_PEAK_KEY`): a CPU's spec puts its fp32 matmul rate there."""
FLOAT8_GATHER_BYTES = 1
"""Bytes per element of a float8 weight that torchao's float8 all-gather sends (e4m3 data; one fp32 scale per
weight beside it, not gathered: `TrainingSpec.fsdp_float8_all_gather`)."""
QUANTIZED_GATHER_PRECISIONS = ("fp8", "fp8_cs", "fp8_blockwise")
"""The precisions whose quantised primary weights (`TrainingSpec.fp8_param_gather`) megatron-core's distributed
optimizer all-gathers as they are, `FLOAT8_GATHER_BYTES` an element: their buffer is uint8 (megatron-core 0.16
distributed_data_parallel.py `_allocate_buffers_for_parameters`, `param_dtype = torch.uint8` for a Float8Tensor or
Float8BlockwiseQTensor; the scales come from the amax all-reduce of TE 2.9 tensor/utils.py
`cast_master_weights_to_fp8`, not gathered). Not MXFP8: its params go through the grad buffer in 16 bits and every
rank quantises them after the gather (param_and_grad_buffer.py, `reuse_grad_buf_for_mxfp8_param_ag`; TE's
`cast_master_weights_to_fp8` raises for MXFP8). Not NVFP4: TE 2.9's `cast_master_weights_to_fp8` and `replace_raw_data`
refuse NVFP4 tensors, so the distributed optimizer cannot run `fp4_param_gather` (its time stays as without)."""
RECOMPUTES = ("none", "selective", "full")
RECOMPUTE_METHODS = ("uniform", "block")
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
"""Megatron `--recompute-modules` choices (megatron-core 0.16 TransformerConfig.recompute_modules)."""
DEFAULT_RECOMPUTE_MODULES = ("core_attn",)
"""What selective recompute redoes when no modules are named (megatron-core's default)."""
CUDA_GRAPH_SCOPES = ("none", "layer", "full_iteration")
DDP_IMPLS = ("megatron-core", "torch", "local")
DISPATCHERS = ("alltoall", "flex")
ATTENTION_BACKENDS = ("flash", "unfused")
# Frameworks whose runtime behaviour the projection knows (calibration sections, defaults, ZeRO-3 semantics):
# the four of the measured runs, DeepSpeed (ZeRO-3 runs of Megatron-LM papers), torchtitan (`paraplan formats`)
# and eager PyTorch on CPU (the hybrid end-to-end check, `paraplan.measure.e2e`).
FRAMEWORKS = (
    "megatron-lm", "nemo-megatron", "megatron-deepspeed", "deepspeed", "llm-foundry", "torchtitan", "pytorch-cpu",
)  # fmt: skip
DEEPSPEED_FRAMEWORKS = frozenset({"deepspeed", "megatron-deepspeed"})
"""Frameworks whose ZeRO is DeepSpeed's: its stage 3 hooks release parameters after every module forward
(`refetches_recomputed_params`) and gather them on demand (`gathers_on_demand`); its stage 2 reduces through its
own bucket; its PipelineEngine refuses ZeRO-2/3 with pipeline stages."""
DEEPSPEED_ZERO3_FRAMEWORKS = DEEPSPEED_FRAMEWORKS
MEGATRON_CORE_DDP_FRAMEWORKS = frozenset({"megatron-lm", "nemo-megatron"})
"""Frameworks whose data parallelism is megatron-core's DistributedDataParallel (its param-and-grad buffers and
buckets); Megatron-DeepSpeed's gradients are reduced by DeepSpeed's engine."""
# megatron-core's default gradient bucket when `--ddp-bucket-size` is unset and the reduction overlaps the backward:
# max(40M, 1M x the data-parallel size with context parallelism) parameters (megatron/training/training.py,
# get_model: `bucket_size = max(40000000, 1000000 * mpu.get_data_parallel_world_size(with_context_parallel=True))`;
# without --overlap-grad-reduce the bucket is the whole buffer).
MEGATRON_MIN_BUCKET_PARAMS = 40_000_000
MEGATRON_BUCKET_PARAMS_PER_DP_RANK = 1_000_000

ALIASES: dict[str, str] = {
    "tp": "tensor_model_parallel_size",
    "pp": "pipeline_model_parallel_size",
    "vpp": "virtual_pipeline_model_parallel_size",
    "cp": "context_parallel_size",
    "ep": "expert_model_parallel_size",
    "etp": "expert_tensor_parallel_size",
    "dp": "data_parallel_size",
    "mbs": "micro_batch_size",
    "gbs": "global_batch_size",
    "seq": "seq_length",
    "sp": "sequence_parallel",
    "recompute": "recompute_granularity",
    "zero": "zero_stage",
    "dist_opt": "use_distributed_optimizer",
}


@fastinit
@dataclass(frozen=True, slots=True)
class TrainingSpec:
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: int = 1
    """Model chunks per pipeline rank (interleaved 1F1B). 1 = no interleaving."""
    context_parallel_size: int = 1
    expert_model_parallel_size: int = 1
    expert_tensor_parallel_size: int | None = None
    """TP inside the experts; None means equal to tensor_model_parallel_size (Megatron default)."""
    data_parallel_size: int | None = None
    """None: derived as num_gpus / (tp * pp * cp)."""
    micro_batch_size: int = 1
    global_batch_size: int = 1
    seq_length: int = 2048
    sequence_parallel: bool = False
    recompute_granularity: Recompute = "none"
    recompute_num_layers: int | None = None
    """With full recompute: Megatron `--recompute-num-layers`. Block method: layers recomputed at the start of each
    stage (virtual chunk), the others keep their activations; uniform method: layers per checkpointed run. None
    means every layer is its own checkpoint (uniform, 1)."""
    recompute_method: Literal["uniform", "block"] = "block"
    """Megatron `--recompute-method` (with full recompute and `recompute_num_layers`). `block`: the first
    `recompute_num_layers` layers of each stage are recomputed whole, the rest keep their activations. `uniform`:
    every layer is recomputed; the stage's layers are cut into runs of `recompute_num_layers`, each checkpointed at
    its input, so one input per run is kept and a run's recompute holds all its layers' activations at once
    (megatron-core TransformerBlock._checkpointed_forward)."""
    recompute_modules: tuple[str, ...] | None = None
    """With selective recompute: Megatron `--recompute-modules` (`RECOMPUTE_MODULES`); None means core_attn only
    (megatron-core's default). `core_attn`, `mlp`, `moe`, `shared_experts` checkpoint the module (its input kept,
    its inside recomputed); `moe_act`, `layernorm`, `mla_up_proj` discard their output and recompute it."""
    recompute_layer_ids: tuple[int, ...] | None = None
    """Primus's recompute by layer index: these decoder layers (0-based, over the whole model) are recomputed
    whole, every other layer keeps its activations (with recompute full; `recompute_num_layers` unset)."""
    use_distributed_optimizer: bool = False
    zero_stage: int = 0
    """0 plain DDP, 1 sharded optimizer states (= distributed optimizer), 2 + sharded grads, 3 full shard."""
    fsdp: bool = False
    """Fully sharded data parallel (torch FSDP / Megatron FSDP): same memory as ZeRO-3."""
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    ddp_impl: Literal["megatron-core", "torch", "local"] = "megatron-core"
    """Whose data-parallel wrapper reduces the gradients of a Megatron run: megatron-core's
    DistributedDataParallel (2023-), or the Megatron-LM papers' `--DDP-impl torch` (torch DDP) / `local`. Only
    megatron-core's has the default bucket size of `effective_ddp_bucket_size`."""
    ddp_bucket_size: int | None = None
    """Megatron `--ddp-bucket-size` (megatron-core DistributedDataParallelConfig.bucket_size): parameters per
    gradient bucket of the data-parallel reduction (and of the distributed optimizer's parameter all-gather), each
    bucket one collective, issued as soon as its gradients are ready. None: the framework default (megatron-core
    sizes buckets max(40M, 1M x dp x cp) parameters with the reduction overlapped: `effective_ddp_bucket_size`; other
    frameworks' buckets are modelled as a fixed 8 per model chunk)."""
    tp_comm_overlap: bool = False
    tp_async_backward: bool = True
    """The backward's tensor-parallel collective of a column-parallel linear's input gradient (all-reduce, or
    reduce-scatter under SP) runs beside its weight-gradient GEMM, and the second gather of its sequence-parallel
    input beside its input-gradient GEMM, as Megatron-LM has done since late 2021 (`--async-tensor-model-parallel-
    allreduce`, on by default, later always) and TransformerEngine does. False: the stream waits for them (the
    Megatron-LM of the 2020-21 papers)."""
    moe_ep_overlap: bool = False
    """Overlap the EP all-to-all with other compute (DualPipe-style, or Megatron's
    `--overlap-moe-expert-parallel-comm`)."""
    moe_pad_expert_input_to_capacity: bool = False
    """Megatron `--moe-pad-expert-input-to-capacity` (needs `moe_expert_capacity_factor`): every expert gets exactly
    its capacity of tokens (dropped beyond, padded below), so the dispatch sizes are known on the host and the
    token counts never leave the GPU: no device-to-host sync per MoE layer (megatron-core 0.16 token_dispatcher.py,
    `drop_and_pad` skips `_maybe_dtoh_and_synchronize`), at the price of the padded work (capacity factor x the
    balanced tokens)."""
    moe_expert_capacity_factor: float | None = None
    """Megatron `--moe-expert-capacity-factor`: tokens per expert = factor x tokens x top-k / experts. None is
    dropless. Without padding paraplan projects balanced routing (no tokens dropped), the factor aside."""
    moe_token_dispatcher_type: Dispatcher = "alltoall"
    """Megatron `--moe-token-dispatcher-type`. `alltoall` sends one copy of a token per chosen expert. `flex`
    (DeepEP or HybridEP, `--moe-flex-dispatcher-backend`) sends a token once to each rank that holds one of its
    experts, and across nodes once to each node, which forwards it over NVLink (DeepEP's internode kernels)."""
    precision: str = "bf16"
    """One of TRAINING_PRECISIONS."""
    first_last_layers_bf16: bool = False
    """Megatron `--first-last-layers-bf16` (megatron-core TransformerConfig, off by default): in an FP8 or NVFP4 run
    the first `num_layers_at_start_in_bf16` and the last `num_layers_at_end_in_bf16` decoder layers run their
    linears in BF16 (megatron-core fp8_utils `is_first_last_bf16_layer`, read by the FP8 and FP4 contexts of each
    layer). The NVFP4 paper keeps about 15% of the layers in BF16 (arXiv:2509.25149, section 4); which layers a
    recipe keeps is the run's flag, not a recipe default."""
    num_layers_at_start_in_bf16: int = 1
    """Megatron `--num-layers-at-start-in-bf16` (default 1): with `first_last_layers_bf16`."""
    num_layers_at_end_in_bf16: int = 1
    """Megatron `--num-layers-at-end-in-bf16` (default 1): with `first_last_layers_bf16`."""
    fp8_param_gather: bool = False
    """Megatron `--fp8-param-gather` (megatron-core DistributedDataParallelConfig.fp8_param_gather, off by default;
    Megatron-Bridge `fp8_param_gather`, and `fp4_param_gather` in NVFP4 runs): the primary weights of the Transformer
    Engine linears are quantised tensors (megatron-core `fp8_model_init` / `fp4_param` through fp8_utils
    `get_fp8_context(is_init=True)`), with no 16-bit copy; the distributed optimizer keeps their fp32 main params and
    casts them into the quantised weights after its step (fp8_utils `quantize_param_shard`). Read in low-precision
    megatron-core runs only (`quantized_primary_weights`)."""
    attention_backend: Literal["flash", "unfused"] = "flash"
    """Fused flash attention (saves only Q, K, V, O and the log-sum-exp) or Megatron's unfused core
    attention (saves the softmax and dropout outputs: the 5*a*s^2*b term of Korthikanti et al.)."""
    kernel_fusion: bool = True
    """Fused memory-bound kernels (TransformerEngine / Apex RMSNorm, SwiGLU and rotary fusions, torch.compile),
    as Megatron-LM and NeMo run by default; False is eager PyTorch, one aten kernel per elementary operation
    (RMSNorm as pow, mean, rsqrt and two multiplies; SwiGLU as silu then multiply; rotate-half rotary; the
    gradients of split fused projections concatenated in backward; `paraplan.graph.kernels`). For torchtitan it is
    the compile flag (`training.compile`, `compile.enable`): under its per-op SAC a compiled block saves only the
    kept outputs its backward reads (`memory.activations.op_policy_saved_bytes`)."""
    cross_entropy_fusion: bool = False
    """Megatron `--cross-entropy-loss-fusion` (NeMo / Megatron-Bridge recipes turn it on): one fused kernel
    for the vocab-parallel loss; off (Megatron-LM's default) runs it as eager fp32 PyTorch, about four times
    the memory traffic over the logits (`paraplan.graph.kernels`)."""
    loss_compiled: bool = False
    """The loss function under torch.compile: torchtitan compiles it whenever it compiles (0.1.0, June 2025:
    `build_cross_entropy_loss` with `training.compile`; 0.2.0: `compile.components`, default ["model", "loss"]).
    Inductor fuses the fp32 cast, log-softmax and nll over the 16-bit logits (torchtitan's `cross_entropy_loss` casts
    inside the loss since 0.1.0): it saves the 16-bit logits and writes a 16-bit gradient, no fp32 log-probabilities
    (`memory.loss`)."""
    pipeline_schedule: str = DEFAULT_SCHEDULE
    """A name in `paraplan.specs.schedule.SCHEDULES` (validated there); `schedule` is its declaration."""
    decoder_first_pipeline_num_layers: int | None = None
    decoder_last_pipeline_num_layers: int | None = None
    pipeline_layout: tuple[int, ...] | None = None
    """Explicit decoder layers per virtual stage, in model order (a simplified
    `--pipeline-model-parallel-layout`)."""
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    grad_reduce_in_fp32: bool = True
    """Megatron keeps fp32 main grads and reduces them in fp32 unless `--grad-reduce-in-bf16`."""
    use_precision_aware_optimizer: bool = False
    """Megatron `--use-precision-aware-optimizer`: TransformerEngine's FusedAdam keeps the main parameters,
    main gradients and Adam moments in the dtypes below instead of fp32 (Megatron-LM arguments.py asserts they
    are fp32 without it)."""
    main_params_dtype: str = "fp32"
    """`--main-params-dtype`: fp32 or fp16 (the master weights)."""
    main_grads_dtype: str = "fp32"
    """`--main-grads-dtype`: fp32 or bf16 (the gradient buffer the optimizer reads)."""
    exp_avg_dtype: str = "fp32"
    """`--exp-avg-dtype`: fp32, fp16, bf16 or fp8 (Adam's first moment)."""
    exp_avg_sq_dtype: str = "fp32"
    """`--exp-avg-sq-dtype`: fp32, fp16, bf16 or fp8 (Adam's second moment)."""
    optimizer_cpu_offload: bool = False
    """Megatron `--optimizer-cpu-offload` (HybridDeviceOptimizer), torchtitan `training.enable_cpu_offload` (FSDP2
    CPUOffloadPolicy): `optimizer_offload_fraction` of the optimizer states and their Adam step live on the host;
    the gradients go down and the updated parameters come back over the host link."""
    optimizer_offload_fraction: float = 1.0
    """Megatron `--optimizer-offload-fraction` (0 to 1, with `optimizer_cpu_offload`): the share of parameters whose
    optimizer states and step are on the CPU (Megatron-LM arguments.py default 1.0)."""
    cpu_offloading_num_layers: int = 0
    """Megatron `--cpu-offloading --cpu-offloading-num-layers N` (activations; megatron-core
    ModelParallelConfig.cpu_offloading_num_layers, TransformerEngine `get_cpu_offload_context`): the saved
    activations of the first N decoder layers go to host memory during forward and come back for backward,
    each copy beside the next layer's compute. 0 = off. Megatron allows it only without pipeline parallelism and
    without recompute, with N below the layer count."""
    cuda_graph_scope: Literal["none", "layer", "full_iteration"] = "none"
    """CUDA graphs (Megatron `--cuda-graph-impl local|transformer_engine` with `--cuda-graph-scope`, NeMo
    `enable_cuda_graph`): `layer` captures each decoder layer's forward and backward (one graph launch replaces
    its kernel launches; an MoE layer whose token counts reach the host stays eager from the router on, as
    megatron-core allows the `moe` scope only with drop-and-pad), `full_iteration` also the micro-batch loop
    (Megatron `--cuda-graph-scope full_iteration`, local implementation). `none`: eager launches."""
    fsdp_float8_all_gather: bool = False
    """torchtitan `[float8] enable_fsdp_float8_all_gather` (torchao `Float8LinearConfig.enable_fsdp_float8_all_gather`,
    tensorwise scaling only): each float8 linear's weight is a `WeightWithDynamicFloat8CastTensor`, whose FSDP2
    `fsdp_pre_all_gather` casts the fp32 shard to float8 and all-gathers those bytes (the scale travels as metadata,
    not gathered); `fsdp_post_all_gather` wraps the gathered bytes as the unsharded `Float8TrainingTensor` (no 16-bit
    copy), which the linear's forward and backward GEMMs use as cast (torchao/float8/fsdp_utils.py). The scales come
    from torchtitan's `precompute_float8_dynamic_scale_for_fsdp` after the optimizer step (one amax pass and one
    all-reduce a step). Valid with torchtitan's FSDP and per-tensor FP8 only (`specs.validate.float8_gather_problems`).
    """
    expandable_segments: bool = False
    """PyTorch's caching allocator with `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`: each stream's blocks live
    in one segment of virtual memory that grows by mapping pages, so a freed block merges with its free neighbours
    whatever allocation they came from and the allocator holds no holes between live activations (c10/cuda/
    CUDACachingAllocator.cpp `ExpandableSegment`). Reserved is then allocated plus the allocator's rounding:
    `memory.model` puts no fragmentation on the activations. NeMo's performance scripts set it on every GPU but the
    B200 (`specs.frameworks`)."""
    framework: str = "megatron-lm"
    """Framework whose runtime overheads apply (megatron-lm, nemo-megatron, megatron-deepspeed, llm-foundry)."""

    # ------------------------------------------------------------------ short names
    @property
    def tp(self) -> int:
        return self.tensor_model_parallel_size

    @property
    def pp(self) -> int:
        return self.pipeline_model_parallel_size

    @property
    def vpp(self) -> int:
        return self.virtual_pipeline_model_parallel_size

    @property
    def cp(self) -> int:
        return self.context_parallel_size

    @property
    def ep(self) -> int:
        return self.expert_model_parallel_size

    @property
    def etp(self) -> int:
        return self.expert_tensor_parallel_size or self.tensor_model_parallel_size

    @property
    def dp(self) -> int:
        return self.data_parallel_size or 1

    @property
    def mbs(self) -> int:
        return self.micro_batch_size

    @property
    def gbs(self) -> int:
        return self.global_batch_size

    @property
    def seq(self) -> int:
        return self.seq_length

    @property
    def num_microbatches(self) -> int:
        return max(1, self.gbs // (self.mbs * self.dp))

    @property
    def bf16_edge_layers(self) -> tuple[int, int]:
        """(first, last) decoder layers whose linears run in BF16 in a low-precision run (`first_last_layers_bf16`);
        (0, 0) when none do."""
        if not self.first_last_layers_bf16 or self.precision not in LOW_PRECISIONS:
            return (0, 0)
        return (self.num_layers_at_start_in_bf16, self.num_layers_at_end_in_bf16)

    @property
    def quantized_primary_weights(self) -> bool:
        """Whether the low-precision linears' primary weights are quantised tensors (`fp8_param_gather` in an FP8 or
        NVFP4 megatron-core run)."""
        megatron_core = self.framework in MEGATRON_CORE_DDP_FRAMEWORKS
        return self.fp8_param_gather and self.precision in LOW_PRECISIONS and megatron_core

    @property
    def gathers_quantized_weights(self) -> bool:
        """Whether megatron-core's distributed optimizer keeps the quantised primary weights' shards, casts its fp32
        main shard straight into them after its step and all-gathers them in one byte (`quantized_primary_weights` in
        `QUANTIZED_GATHER_PRECISIONS`, sharded optimizer states, parameters replicated: megatron-core 0.16
        distrib_optimizer.py `_copy_main_params_to_model_params`, fp8_utils.py `quantize_param_shard`). Megatron FSDP
        is not modelled (its time stays as without)."""
        return (
            self.quantized_primary_weights
            and self.precision in QUANTIZED_GATHER_PRECISIONS
            and self.shards_optimizer
            and not self.shards_params
        )

    @property
    def grad_reduce_bytes(self) -> int:
        """Bytes per gradient element in data-parallel reductions: fp32 when reduced in fp32 (Megatron
        `--accumulate-allreduce-grads-in-fp32`, torch FSDP `reduce_dtype`) or trained in fp32, else 16-bit."""
        return 4 if self.grad_reduce_in_fp32 or self.precision == "fp32" else 2

    @property
    def param_gather_bytes(self) -> int:
        """Bytes per parameter element that sharded data parallelism all-gathers (the compute copy)."""
        return 4 if self.precision == "fp32" else 2

    def fsdp_gather_bytes(self, params: float, float8_params: float) -> float:
        """Bytes sharded data parallelism all-gathers for `params` parameters, `float8_params` of them the weights of
        float8 linears: those in `FLOAT8_GATHER_BYTES` under `fsdp_float8_all_gather`, the rest (norms, embedding,
        LM head, experts' grouped weights: no `Float8Linear`) in `param_gather_bytes`."""
        if not self.fsdp_float8_all_gather:
            return self.param_gather_bytes * params
        return self.one_byte_gather_bytes(params, float8_params)

    def one_byte_gather_bytes(self, params: float, one_byte_params: float) -> float:
        """Bytes an all-gather of `params` parameters sends when `one_byte_params` of them go in
        `FLOAT8_GATHER_BYTES` and the rest in `param_gather_bytes` (torchao's float8 all-gather,
        `gathers_quantized_weights`)."""
        return self.param_gather_bytes * (params - one_byte_params) + FLOAT8_GATHER_BYTES * one_byte_params

    @property
    def shards_params(self) -> bool:
        return self.fsdp or self.zero_stage >= 3

    @property
    def refetches_recomputed_params(self) -> bool:
        """Sharded parameters are freed after each module's forward, the recomputed one's too, and fetched again
        for its backward (DeepSpeed ZeRO-3's post-forward release, short of `stage3_max_reuse_distance`); torch
        FSDP keeps what the recomputed forward gathered for the backward that follows it."""
        return self.shards_params and self.framework in DEEPSPEED_ZERO3_FRAMEWORKS

    @property
    def gathers_on_demand(self) -> bool:
        """Sharded parameters are gathered when a module is about to run and waited for, and gradients
        reduce-scattered before the backward goes on, so ZeRO-3 communication alternates with compute instead
        of overlapping it: DeepSpeed ZeRO-3 as measured in 2021 (Narayanan et al. SC21 Table 2, where step
        time = compute + all ZeRO-3 communication at 384 and 768 GPUs). torch FSDP and Megatron FSDP prefetch
        the next unit while the current one computes."""
        return self.shards_params and self.framework in DEEPSPEED_ZERO3_FRAMEWORKS

    @property
    def schedule(self) -> PipelineSchedule:
        """The pipeline schedule's declaration; raises ConfigError for an unknown name."""
        return schedule_named(self.pipeline_schedule)

    @property
    def overlaps_ep(self) -> bool:
        """The EP all-to-all runs beside other compute: asked for (`moe_ep_overlap`), or by a schedule that always
        pairs a forward with another micro-batch's backward (DualPipe's F&B pairs)."""
        spec = SCHEDULES.get(self.pipeline_schedule)
        return self.moe_ep_overlap or (spec is not None and spec.pairs_forward_backward)

    @property
    def moe_host_sync(self) -> bool:
        """MoE layers wait for their token counts on the host (Megatron's dropless dispatchers); drop-and-pad does
        not."""
        return not self.moe_pad_expert_input_to_capacity

    @property
    def moe_padding_factor(self) -> float:
        """Routed token copies per balanced one: the capacity factor under drop-and-pad, else 1."""
        if self.moe_pad_expert_input_to_capacity and self.moe_expert_capacity_factor is not None:
            return self.moe_expert_capacity_factor
        return 1.0

    @property
    def offloaded_optimizer_fraction(self) -> float:
        """Share of the optimizer's parameters whose states and step are on the host."""
        return self.optimizer_offload_fraction if self.optimizer_cpu_offload else 0.0

    @property
    def effective_ddp_bucket_size(self) -> int | None:
        """Parameters per data-parallel gradient bucket: `ddp_bucket_size` when given, else megatron-core's default
        (max(40M, 1M x dp x cp), `MEGATRON_MIN_BUCKET_PARAMS`) for a megatron-core DDP run that overlaps the
        reduction; None where the buckets are not megatron-core's DDP ones (FSDP, ZeRO-2/3, other frameworks) or
        the reduction does not overlap (one bucket per buffer, all after the backward): the fixed per-chunk count
        (`sim.costs.DEFAULT_DP_BUCKETS_PER_CHUNK`) stands for those."""
        if self.ddp_bucket_size is not None:
            return self.ddp_bucket_size
        if self.framework not in MEGATRON_CORE_DDP_FRAMEWORKS or self.ddp_impl != "megatron-core":
            return None
        if self.shards_params or self.zero_stage == 2:
            return None
        if not self.overlap_grad_reduce:
            return None
        return max(MEGATRON_MIN_BUCKET_PARAMS, MEGATRON_BUCKET_PARAMS_PER_DP_RANK * self.dp * self.cp)

    @property
    def shards_optimizer(self) -> bool:
        return self.use_distributed_optimizer or self.zero_stage >= 1 or self.fsdp

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    def __reduce__(self) -> tuple[type[TrainingSpec], tuple[object, ...]]:
        """Pickled as its field values, rebuilt by `__init__` (positional, `fields` order): the same bytes as the
        dataclass's state list, in about half the time to dump and load (the tuner's worker processes send specs)."""
        return TrainingSpec, _field_values(self)

    def with_values(self, **values: object) -> TrainingSpec:
        """Replace fields given by canonical or short name (`ALIASES`); None values are ignored. A name that is
        neither is a ConfigError (with the closest valid name), never dropped."""
        reject_unknown_names(values, SETTING_NAMES, "training setting")
        canonical = {ALIASES.get(k, k): v for k, v in values.items() if v is not None}
        typed, problems = coerce_fields(TrainingSpec, canonical, "training setting")
        if problems:
            raise ConfigError(problems)
        return replace(self, **typed)


TRAINING_FIELD_NAMES: frozenset[str] = frozenset(f.name for f in fields(TrainingSpec))
SETTING_NAMES: frozenset[str] = TRAINING_FIELD_NAMES | frozenset(ALIASES)
"""Every name `TrainingSpec.with_values` and the training files take: the fields and their short aliases."""

_FIELD_ORDER: tuple[str, ...] = tuple(f.name for f in fields(TrainingSpec))  # every field is an init field
_FIELD_INDEX: dict[str, int] = {name: i for i, name in enumerate(_FIELD_ORDER)}
_field_values = attrgetter(*_FIELD_ORDER)


def spec_with(spec: TrainingSpec, changes: Mapping[str, object]) -> TrainingSpec:
    """`dataclasses.replace(spec, **changes)` built positionally (all of TrainingSpec's fields are init fields, in
    `fields` order): the same spec at about a fifth of the cost; the tuner builds a few per candidate."""
    values = list(_field_values(spec))
    for name, value in changes.items():
        index = _FIELD_INDEX.get(name)
        if index is None:
            raise TypeError(f"TrainingSpec has no field {name!r}")
        values[index] = value
    return TrainingSpec(*values)
