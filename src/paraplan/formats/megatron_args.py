"""The Megatron-LM arguments paraplan knows: flag, destination name (what Primus YAML uses), and kind.

From `megatron/training/arguments.py` (Megatron-LM core_r0.13/0.14). `RELEVANT` change the plan; `IGNORED`
are accepted and do not change step time or memory (learning rate, data paths, logging, checkpointing,
kernel fusions). Any other flag is reported as unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["switch", "int", "float", "str", "list"]


@dataclass(frozen=True, slots=True)
class Arg:
    dest: str
    kind: Kind
    flag: str = ""
    sets: bool = True
    """For a switch: the value its destination takes when the flag is given (False for `--no-...`)."""
    choices: tuple[str, ...] = ()

    @property
    def cli(self) -> str:
        return self.flag or "--" + self.dest.replace("_", "-")


def _a(dest: str, kind: Kind, flag: str = "", sets: bool = True, choices: tuple[str, ...] = ()) -> Arg:
    return Arg(dest, kind, flag, sets, choices)


RELEVANT: tuple[Arg, ...] = (
    # --- parallelism
    _a("tensor_model_parallel_size", "int"),
    _a("pipeline_model_parallel_size", "int"),
    _a("num_layers_per_virtual_pipeline_stage", "int"),
    _a("num_virtual_stages_per_pipeline_rank", "int"),
    _a("context_parallel_size", "int"),
    _a("cp_comm_type", "list"),
    _a("expert_model_parallel_size", "int"),
    _a("expert_tensor_parallel_size", "int"),
    _a("sequence_parallel", "switch"),
    _a("use_distributed_optimizer", "switch"),
    _a("overlap_grad_reduce", "switch"),
    _a("overlap_param_gather", "switch"),
    _a("ddp_bucket_size", "int"),
    _a("DDP_impl", "str", flag="--DDP-impl", choices=("local", "torch")),  # Megatron-LM before megatron-core's DDP
    _a("tp_comm_overlap", "switch"),
    _a("overlap_moe_expert_parallel_comm", "switch"),
    _a("moe_token_dispatcher_type", "str", choices=("allgather", "alltoall", "flex")),
    _a("moe_enable_deepep", "switch"),
    _a("use_torch_fsdp2", "switch"),
    _a("use_megatron_fsdp", "switch"),
    _a("data_parallel_sharding_strategy", "str", choices=("no_shard", "optim", "optim_grads", "optim_grads_params")),
    _a("decoder_first_pipeline_num_layers", "int"),
    _a("decoder_last_pipeline_num_layers", "int"),
    _a("account_for_embedding_in_pipeline_split", "switch"),
    _a("account_for_loss_in_pipeline_split", "switch"),
    _a("pipeline_model_parallel_layout", "str"),
    _a("grad_reduce_in_bf16", "switch"),
    _a("use_precision_aware_optimizer", "switch"),
    _a("main_params_dtype", "str", choices=("fp32", "fp16")),
    _a("main_grads_dtype", "str", choices=("fp32", "bf16")),
    _a("exp_avg_dtype", "str", choices=("fp32", "fp16", "bf16", "fp8")),
    _a("exp_avg_sq_dtype", "str", choices=("fp32", "fp16", "bf16", "fp8")),
    # --- batch
    _a("micro_batch_size", "int"),
    _a("global_batch_size", "int"),
    _a("seq_length", "int"),
    _a("rampup_batch_size", "list"),
    # --- model shape
    _a("num_layers", "int"),
    _a("hidden_size", "int"),
    _a("ffn_hidden_size", "int"),
    _a("num_attention_heads", "int"),
    _a("group_query_attention", "switch"),
    _a("num_query_groups", "int"),
    _a("kv_channels", "int"),
    _a("vocab_size", "int"),
    _a("make_vocab_size_divisible_by", "int"),
    _a("tokenizer_type", "str"),
    _a("tokenizer_model", "str"),
    _a("swiglu", "switch"),
    _a("squared_relu", "switch"),
    _a("normalization", "str", choices=("LayerNorm", "RMSNorm")),
    _a("position_embedding_type", "str", choices=("learned_absolute", "rope", "mrope", "relative", "none", "yarn")),
    _a("use_rotary_position_embeddings", "switch"),
    _a("add_position_embedding", "switch", "--no-position-embedding", sets=False),
    _a("untie_embeddings_and_output_weights", "switch"),
    _a("add_bias_linear", "switch", "--disable-bias-linear", sets=False),
    # --- kernel fusions (paraplan's one `kernel_fusion` switch: megatron_map)
    _a("bias_swiglu_fusion", "switch", "--no-bias-swiglu-fusion", sets=False),
    _a("apply_rope_fusion", "switch", "--no-rope-fusion", sets=False),
    _a("persist_layer_norm", "switch", "--no-persist-layer-norm", sets=False),
    _a("cross_entropy_loss_fusion", "switch"),
    _a("add_qkv_bias", "switch"),
    _a("hidden_dropout", "float"),
    _a("attention_dropout", "float"),
    _a("attention_backend", "str", choices=("flash", "fused", "unfused", "local", "auto")),
    _a("use_flash_attn", "switch"),
    # --- mixture of experts
    _a("num_experts", "int"),
    _a("moe_ffn_hidden_size", "int"),
    _a("moe_router_topk", "int"),
    _a("moe_shared_expert_intermediate_size", "int"),
    _a("moe_layer_freq", "str"),
    _a("moe_expert_capacity_factor", "float"),
    # --- multi-head latent attention, multi-token prediction
    _a("multi_latent_attention", "switch"),
    _a("q_lora_rank", "int"),
    _a("kv_lora_rank", "int"),
    _a("qk_head_dim", "int"),
    _a("qk_pos_emb_head_dim", "int"),
    _a("v_head_dim", "int"),
    _a("mtp_num_layers", "int"),
    # --- hybrid models (pretrain_mamba.py; megatron-core 0.19.2 TransformerConfig and hybrid_layer_allocation)
    _a("is_hybrid_model", "switch"),
    _a("hybrid_override_pattern", "str"),
    _a("hybrid_layer_pattern", "str"),
    _a("mamba_state_dim", "int"),
    _a("mamba_head_dim", "int"),
    _a("mamba_num_groups", "int"),
    _a("mamba_num_heads", "int"),
    # --- Gated DeltaNet among full attention (megatron-core 0.19.2 TransformerConfig, Qwen3-Next)
    _a("experimental_attention_variant", "str", choices=("gated_delta_net", "dsa")),
    _a("linear_attention_freq", "int"),
    _a("linear_conv_kernel_dim", "int"),
    _a("linear_key_head_dim", "int"),
    _a("linear_value_head_dim", "int"),
    _a("linear_num_key_heads", "int"),
    _a("linear_num_value_heads", "int"),
    _a("attention_output_gate", "switch"),
    _a("dsa_indexer_n_heads", "int"),
    _a("dsa_indexer_head_dim", "int"),
    _a("dsa_indexer_topk", "int"),
    # --- local attention and attention sinks: megatron-core 0.16.1 TransformerConfig fields (read in the wheel);
    # Megatron-LM's argument of a config field takes the field's name (core_transformer_config_from_args copies
    # same-named arguments). `window_size` is "left,right" (gpt-oss: 127,0); chunked attention has no field.
    _a("window_size", "str"),
    _a("window_attn_skip_freq", "int"),
    _a("no_rope_freq", "int"),
    _a("softmax_type", "str", choices=("vanilla", "off-by-one", "learnable")),
    # gpt-oss's YaRN RoPE and GLU clamp (megatron-core 0.16 TransformerConfig fields, same rule)
    _a("yarn_rotary_scaling_factor", "float"),
    _a("activation_func_clamp_value", "float"),
    # --- recompute
    _a("recompute_granularity", "str", choices=("full", "selective")),
    _a("recompute_method", "str", choices=("uniform", "block")),
    _a("recompute_num_layers", "int"),
    _a("recompute_activations", "switch"),
    _a("recompute_modules", "list"),
    # --- production knobs (megatron-core 0.16 TransformerConfig / ModelParallelConfig / OptimizerConfig)
    _a("moe_pad_expert_input_to_capacity", "switch"),
    _a("cuda_graph_impl", "str", choices=("none", "local", "transformer_engine")),
    _a("cuda_graph_scope", "list"),
    _a("enable_cuda_graph", "switch"),
    _a("external_cuda_graph", "switch"),
    _a("cpu_offloading", "switch"),
    _a("cpu_offloading_num_layers", "int"),
    _a("cpu_offloading_activations", "switch"),
    _a("cpu_offloading_weights", "switch"),
    _a("optimizer_cpu_offload", "switch"),
    _a("optimizer_offload_fraction", "float"),
    _a("overlap_cpu_optimizer_d2h_h2d", "switch"),
    # --- precision
    _a("fp16", "switch"),
    _a("bf16", "switch"),
    _a("fp8", "str", "--fp8-format", choices=("e4m3", "hybrid")),
    _a("fp8_recipe", "str", choices=("delayed", "tensorwise", "mxfp8", "blockwise")),
    _a("fp8_margin", "int"),
    _a("fp8_interval", "int"),
    _a("fp8_amax_history_len", "int"),
    _a("fp8_amax_compute_algo", "str", choices=("most_recent", "max")),
    _a("fp8_wgrad", "switch", "--no-fp8-wgrad", sets=False),
    _a("fp8_param_gather", "switch"),
    _a("first_last_layers_bf16", "switch"),
    _a("num_layers_at_start_in_bf16", "int"),
    _a("num_layers_at_end_in_bf16", "int"),
    _a("fp4", "str", "--fp4-format", choices=("e2m1",)),
    _a("fp4_recipe", "str", choices=("nvfp4", "custom")),
    # NVFP4 primary weights (megatron-core TransformerConfig.fp4_param; Megatron-Bridge 0.6.2 MixedPrecisionConfig
    # `fp4_param_gather`, kept in sync with `fp4_param`)
    _a("fp4_param_gather", "switch"),
    _a("optimizer", "str", choices=("adam", "sgd")),
)

FP8_DETAIL_DESTS = (
    "fp8_recipe",
    "fp8_margin",
    "fp8_interval",
    "fp8_amax_history_len",
    "fp8_amax_compute_algo",
    "fp8_wgrad",
    "fp8_param_gather",
    "first_last_layers_bf16",
    "num_layers_at_start_in_bf16",
    "num_layers_at_end_in_bf16",
)
BF16_LAYER_DESTS = ("first_last_layers_bf16", "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16")
"""FP8 detail flags that FP4 runs read too (megatron-core's FP4 context skips the BF16 layers as the FP8 one
does)."""
MLA_DETAIL_DESTS = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
MOE_DETAIL_DESTS = (
    "moe_ffn_hidden_size",
    "moe_router_topk",
    "moe_shared_expert_intermediate_size",
    "moe_layer_freq",
    "moe_expert_capacity_factor",
)

_IGNORED_SWITCHES = (
    "use_mcore_models use_legacy_models qk_layernorm apply_layernorm_1p apply_query_key_layer_scaling "
    "attention_softmax_in_fp32 accumulate_allreduce_grads_in_fp32 no_load_optim no_load_rng no_save_optim "
    "no_save_rng mock_data log_throughput log_params_norm log_num_zeros_in_grad log_timers_to_tensorboard "
    "log_validation_ppl_to_tensorboard log_memory_to_tensorboard log_world_size_to_tensorboard moe_grouped_gemm "
    "moe_permute_fusion moe_router_enable_expert_bias moe_shared_expert_overlap "
    "moe_router_force_load_balancing moe_use_legacy_grouped_gemm "
    "moe_per_layer_logging moe_router_pre_softmax moe_layer_recompute use_dist_ckpt "
    "async_save auto_detect_ckpt_format finetune use_checkpoint_args exit_signal_handler profile "
    "use_pytorch_profiler record_memory_history manual_gc eod_mask_loss reset_position_ids reset_attention_mask "
    "use_cpu_initialization deterministic_mode calculate_per_token_loss defer_embedding_wgrad_compute "
    "delay_wgrad_compute ddp_average_in_collective use_rope_scaling "
    "distribute_saved_activations sft skip_train init_method_xavier_uniform log_progress enable_experimental "
    "disable_straggler_on_startup use_persistent_ckpt_worker ckpt_fully_parallel_load"
).split()
_IGNORED_NEGATIVE_SWITCHES = (
    ("masked_softmax_fusion", "--no-masked-softmax-fusion"),
    ("gradient_accumulation_fusion", "--no-gradient-accumulation-fusion"),
    ("bias_gelu_fusion", "--no-bias-gelu-fusion"),
    ("bias_dropout_fusion", "--no-bias-dropout-fusion"),
    ("async_tensor_model_parallel_allreduce", "--no-async-tensor-model-parallel-allreduce"),
    ("create_attention_mask_in_dataloader", "--no-create-attention-mask-in-dataloader"),
    ("mmap_bin_files", "--no-mmap-bin-files"),
    ("overlap_p2p_comm", "--no-overlap-p2p-communication"),
    ("check_for_nan_in_loss_and_grad", "--no-check-for-nan-in-loss-and-grad"),
    ("log_loss_scale_to_tensorboard", "--no-log-loss-scale-to-tensorboard"),
    ("align_grad_reduce", "--no-align-grad-reduce"),
    ("align_param_gather", "--no-align-param-gather"),
    ("tp_comm_bulk_wgrad", "--disable-tp-comm-bulk-wgrad"),
    ("tp_comm_bulk_dgrad", "--disable-tp-comm-bulk-dgrad"),
)
_IGNORED_VALUED = (
    "train_iters train_samples lr min_lr lr_decay_style lr_decay_iters lr_decay_samples lr_warmup_iters "
    "lr_warmup_fraction lr_warmup_samples lr_warmup_init lr_wsd_decay_style lr_wsd_decay_iters weight_decay "
    "weight_decay_incr_style start_weight_decay end_weight_decay adam_beta1 adam_beta2 adam_eps sgd_momentum "
    "clip_grad init_method_std seed loss_scale initial_loss_scale min_loss_scale loss_scale_window hysteresis "
    "data_path train_data_path valid_data_path test_data_path split data_cache_path vocab_file merge_file "
    "dataloader_type num_workers num_dataset_builder_threads log_interval tensorboard_dir "
    "tensorboard_log_interval tensorboard_queue_size timing_log_level timing_log_option wandb_project "
    "wandb_exp_name wandb_save_dir eval_interval eval_iters save load save_interval ckpt_format "
    "pretrained_checkpoint exit_interval exit_duration_in_mins manual_gc_interval distributed_backend "
    "distributed_timeout_minutes profile_step_start profile_step_end profile_ranks rotary_base "
    "rotary_percent rotary_scaling_factor rotary_seq_len_interpolation_factor rope_scaling_factor mscale "
    "mscale_all_dim norm_epsilon max_position_embeddings transformer_impl tp_comm_overlap_cfg "
    "num_distributed_optimizer_instances "
    "moe_router_load_balancing_type moe_aux_loss_coeff moe_z_loss_coeff moe_input_jitter_eps "
    "moe_router_dtype moe_router_topk_scaling_factor moe_router_score_function "
    "moe_router_bias_update_rate moe_router_num_groups moe_router_group_topk moe_token_drop_policy "
    "moe_flex_dispatcher_backend mtp_loss_scaling_factor empty_unused_memory_level local_rank "
    "microbatch_group_size_per_virtual_pipeline_stage check_weight_hash_across_dp_replicas_interval "
    "tokenizer_prompt_format data_args_path per_split_data_args_path mid_level_dataset_surplus "
    "object_storage_cache_path tp_comm_bootstrap_backend ckpt_convert_format ckpt_convert_save "
    "dist_ckpt_strictness non_persistent_save_interval non_persistent_ckpt_type logging_level "
    "straggler_minmax_count decoder_seq_length encoder_seq_length "
    # --cross-entropy-fusion-impl {native,te} (Megatron-LM core_r0.13): which fused kernel --cross-entropy-loss-fusion
    # uses; the loss's memory and time do not depend on it here
    "cross_entropy_fusion_impl"
).split()

IGNORED: tuple[Arg, ...] = (
    *(Arg(d, "switch") for d in _IGNORED_SWITCHES),
    *(Arg(d, "switch", f, sets=False) for d, f in _IGNORED_NEGATIVE_SWITCHES),
    *(Arg(d, "list") for d in _IGNORED_VALUED),
)

BY_FLAG: dict[str, Arg] = {a.cli: a for a in (*RELEVANT, *IGNORED)}
BY_DEST: dict[str, Arg] = {a.dest: a for a in (*RELEVANT, *IGNORED)}
RELEVANT_DESTS = frozenset(a.dest for a in RELEVANT)
