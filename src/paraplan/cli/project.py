"""`paraplan project` and `paraplan memory`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from paraplan.cli import reports
from paraplan.cli.common import (
    AnalyticOpt,
    CrossEntropyFusionOpt,
    GpuOpt,
    GpusOpt,
    KernelFusionOpt,
    ModelOpt,
    MoeDispatcherOpt,
    ProfileOpt,
    check_outputs,
    console,
    err_console,
    fitted_profile,
    handle_errors,
)
from paraplan.cli.formats import (
    emit_plan,
    export_plan_chakra,
    model_with_config,
    print_notes,
    read_config_options,
    system_with_config,
    training_with_config,
)
from paraplan.cli.printers import print_memory, print_projection, write_trace
from paraplan.cli.spec_options import (
    MODEL_OPTIONS,
    SYSTEM_OPTIONS,
    TRAINING_OPTIONS,
    show_spec_defaults,
    spec_values,
)
from paraplan.errors import ConfigError
from paraplan.formats import EMIT_FORMATS, canonical_format
from paraplan.projection import ProjectionOptions, project_specs
from paraplan.report.trace import DEFAULT_MAX_MIB, check_trace_size, expected_trace_basis, expected_trace_bytes
from paraplan.specs.frameworks import defaults_on, era_training_values, framework_family, parse_version
from paraplan.specs.schedule import SCHEDULES, megatron_schedule
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import ALIASES, TrainingSpec
from paraplan.specs.validate import check, resolve_dp

Opt = typer.Option


def _projection_command(
    ctx: typer.Context,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    gpus: GpusOpt = None,
    # --- training (Megatron names via aliases)
    tp: Annotated[int | None, Opt("--tp", help="tensor_model_parallel_size")] = None,
    pp: Annotated[int | None, Opt("--pp", help="pipeline_model_parallel_size")] = None,
    vpp: Annotated[
        int | None, Opt("--vpp", help="virtual_pipeline_model_parallel_size (model chunks per rank)")
    ] = None,
    cp: Annotated[int | None, Opt("--cp", help="context_parallel_size")] = None,
    ep: Annotated[int | None, Opt("--ep", help="expert_model_parallel_size")] = None,
    etp: Annotated[int | None, Opt("--etp", help="expert_tensor_parallel_size (default: tp)")] = None,
    dp: Annotated[int | None, Opt("--dp", help="data parallel size (default: gpus / (tp*pp*cp))")] = None,
    mbs: Annotated[int | None, Opt("--mbs", help="micro_batch_size")] = None,
    gbs: Annotated[
        int | None, Opt("--gbs", help="global_batch_size (default: mbs*dp, one micro-batch per rank, as Megatron-LM)")
    ] = None,
    seq: Annotated[int | None, Opt("--seq", help="seq_length")] = None,
    recompute: Annotated[str | None, Opt("--recompute", help="none | selective | full")] = None,
    recompute_num_layers: Annotated[int | None, Opt("--recompute-num-layers")] = None,
    recompute_method: Annotated[
        str | None, Opt("--recompute-method", help="uniform | block (with --recompute full; default block)")
    ] = None,
    recompute_modules: Annotated[
        str | None,
        Opt("--recompute-modules", help="with --recompute selective: core_attn,mlp,moe,moe_act,layernorm,..."),
    ] = None,
    recompute_layer_ids: Annotated[
        str | None, Opt("--recompute-layer-ids", help="with --recompute full: layers recomputed, 0,5,17 (Primus)")
    ] = None,
    cuda_graph_scope: Annotated[
        str | None, Opt("--cuda-graph-scope", help="none | layer | full_iteration (CUDA graphs)")
    ] = None,
    cpu_offloading_num_layers: Annotated[
        int | None, Opt("--cpu-offloading-num-layers", help="decoder layers whose activations go to the host")
    ] = None,
    optimizer_cpu_offload: Annotated[bool | None, Opt("--optimizer-cpu-offload/--no-optimizer-cpu-offload")] = None,
    expandable_segments: Annotated[
        bool | None,
        Opt(
            "--expandable-segments/--no-expandable-segments",
            help="the CUDA caching allocator with expandable segments: no fragmentation (NeMo does, but on B200)",
        ),
    ] = None,
    optimizer_offload_fraction: Annotated[
        float | None, Opt("--optimizer-offload-fraction", help="share of the optimizer on the CPU (default 1)")
    ] = None,
    fsdp_float8_all_gather: Annotated[
        bool | None,
        Opt(
            "--fsdp-float8-all-gather/--no-fsdp-float8-all-gather",
            help="torchtitan FSDP all-gathers its float8 linears' weights in float8 (torchao; per-tensor FP8)",
        ),
    ] = None,
    moe_pad_to_capacity: Annotated[
        bool | None,
        Opt("--moe-pad-expert-input-to-capacity/--no-moe-pad-expert-input-to-capacity", help="drop-and-pad, no sync"),
    ] = None,
    moe_capacity_factor: Annotated[float | None, Opt("--moe-expert-capacity-factor")] = None,
    sequence_parallel: Annotated[bool | None, Opt("--sequence-parallel/--no-sequence-parallel", "--sp/--no-sp")] = None,
    distributed_optimizer: Annotated[bool | None, Opt("--distributed-optimizer/--no-distributed-optimizer")] = None,
    zero: Annotated[int | None, Opt("--zero", help="ZeRO stage 0-3")] = None,
    fsdp: Annotated[bool | None, Opt("--fsdp/--no-fsdp")] = None,
    overlap_grad_reduce: Annotated[bool | None, Opt("--overlap-grad-reduce/--no-overlap-grad-reduce")] = None,
    overlap_param_gather: Annotated[bool | None, Opt("--overlap-param-gather/--no-overlap-param-gather")] = None,
    ddp_bucket_size: Annotated[
        int | None, Opt("--ddp-bucket-size", help="parameters per DDP gradient bucket (Megatron --ddp-bucket-size)")
    ] = None,
    tp_comm_overlap: Annotated[bool | None, Opt("--tp-comm-overlap/--no-tp-comm-overlap")] = None,
    tp_async_backward: Annotated[
        bool | None,
        Opt(
            "--tp-async-backward/--no-tp-async-backward",
            help="backward TP collectives beside the GEMMs (Megatron since late 2021, TransformerEngine)",
        ),
    ] = None,
    ep_overlap: Annotated[bool | None, Opt("--ep-overlap/--no-ep-overlap")] = None,
    moe_dispatcher: MoeDispatcherOpt = None,
    precision: Annotated[str | None, Opt("--precision", help="fp16 bf16 fp8 fp8_cs fp8_blockwise mxfp8 nvfp4")] = None,
    first_last_layers_bf16: Annotated[
        bool | None,
        Opt(
            "--first-last-layers-bf16/--no-first-last-layers-bf16",
            help="FP8/NVFP4 runs: the first and last decoder layers' linears in BF16 (Megatron flag; default off)",
        ),
    ] = None,
    num_layers_at_start_in_bf16: Annotated[
        int | None, Opt("--num-layers-at-start-in-bf16", help="with --first-last-layers-bf16 (Megatron default 1)")
    ] = None,
    num_layers_at_end_in_bf16: Annotated[
        int | None, Opt("--num-layers-at-end-in-bf16", help="with --first-last-layers-bf16 (Megatron default 1)")
    ] = None,
    fp8_param_gather: Annotated[
        bool | None,
        Opt(
            "--fp8-param-gather/--no-fp8-param-gather",
            help="FP8/NVFP4 megatron-core runs: quantised primary weights, no 16-bit copy (Megatron flag; default off)",
        ),
    ] = None,
    schedule: Annotated[str | None, Opt("--schedule", help=" ".join(SCHEDULES))] = None,
    attention_backend: Annotated[str | None, Opt("--attention-backend", help="flash | unfused")] = None,
    kernel_fusion: KernelFusionOpt = None,
    cross_entropy_fusion: CrossEntropyFusionOpt = None,
    first_stage_layers: Annotated[int | None, Opt("--decoder-first-pipeline-num-layers")] = None,
    last_stage_layers: Annotated[int | None, Opt("--decoder-last-pipeline-num-layers")] = None,
    pipeline_layout: Annotated[str | None, Opt("--pipeline-layout", help="layers per virtual stage: 4,4,3,...")] = None,
    account_embedding: Annotated[
        bool | None, Opt("--account-for-embedding-in-pipeline-split/--no-account-for-embedding-in-pipeline-split")
    ] = None,
    account_loss: Annotated[
        bool | None, Opt("--account-for-loss-in-pipeline-split/--no-account-for-loss-in-pipeline-split")
    ] = None,
    framework: Annotated[
        str | None,
        Opt("--framework", help="megatron-lm nemo-megatron megatron-deepspeed deepspeed llm-foundry torchtitan"),
    ] = None,
    framework_version: Annotated[
        str | None,
        Opt(
            "--framework-version",
            help="the framework release whose defaults fill unset settings: YYYY-MM, YYYY-MM-DD or YY.MM "
            "(NeMo / Megatron-Bridge); default: today's (paraplan.specs.frameworks)",
        ),
    ] = None,
    config_file: Annotated[str | None, Opt("--config", help="YAML file of training settings")] = None,
    # --- model fields
    num_layers: Annotated[int | None, Opt("--num-layers")] = None,
    hidden_size: Annotated[int | None, Opt("--hidden-size")] = None,
    ffn_hidden_size: Annotated[int | None, Opt("--ffn-hidden-size")] = None,
    num_attention_heads: Annotated[int | None, Opt("--num-attention-heads")] = None,
    num_query_groups: Annotated[int | None, Opt("--num-query-groups")] = None,
    kv_channels: Annotated[int | None, Opt("--kv-channels")] = None,
    vocab_size: Annotated[int | None, Opt("--vocab-size")] = None,
    num_experts: Annotated[int | None, Opt("--num-experts")] = None,
    moe_ffn_hidden_size: Annotated[int | None, Opt("--moe-ffn-hidden-size")] = None,
    moe_router_topk: Annotated[int | None, Opt("--moe-router-topk")] = None,
    activation: Annotated[str | None, Opt("--activation", help="swiglu gelu squared_relu")] = None,
    norm: Annotated[str | None, Opt("--norm", help="rmsnorm | layernorm")] = None,
    # --- system overrides
    system_file: Annotated[str | None, Opt("--system-file", help="YAML system description or overrides")] = None,
    gpus_per_node: Annotated[int | None, Opt("--gpus-per-node")] = None,
    nic_gbps: Annotated[float | None, Opt("--nic-gbps", help="scale-out Gb/s per GPU")] = None,
    scale_up_gbps: Annotated[float | None, Opt("--scale-up-gbps", help="NVLink GB/s per GPU per direction")] = None,
    hbm_gib: Annotated[float | None, Opt("--hbm-gib")] = None,
    hbm_tbps: Annotated[float | None, Opt("--hbm-tbps")] = None,
    bf16_tflops: Annotated[float | None, Opt("--bf16-tflops")] = None,
    # --- output
    as_json: Annotated[bool, Opt("--json", help="print one JSON object")] = False,
    trace: Annotated[str | None, Opt("--trace", help="write a Chrome/Perfetto trace JSON")] = None,
    trace_max_mib: Annotated[
        float,
        Opt("--trace-max-mib", help="refuse a --trace or --chakra output estimated larger than this (MiB)"),
    ] = DEFAULT_MAX_MIB,
    profile: ProfileOpt = None,
    analytic: AnalyticOpt = False,
    # --- configs in the frameworks' own formats (paraplan.formats)
    megatron_args: Annotated[
        str | None, Opt("--megatron-args", help="Megatron-LM arguments: a string, or a file of them (a launch script)")
    ] = None,
    from_config: Annotated[
        str | None, Opt("--from-config", help="a Megatron-LM, Primus, torchtitan, NeMo or HF config file")
    ] = None,
    config_format: Annotated[
        str | None, Opt("--format", help="format of --from-config: megatron primus torchtitan nemo hf (default: guess)")
    ] = None,
    emit_format: Annotated[
        str | None, Opt("--emit", help="also print this plan as a megatron, primus, torchtitan, nemo or hf config")
    ] = None,
    emit_file: Annotated[str | None, Opt("--emit-file", help="write the --emit config to this file")] = None,
    chakra: Annotated[
        str | None, Opt("--chakra", help="write Chakra execution traces (one per rank) for ASTRA-sim to this folder")
    ] = None,
    html: reports.HtmlOpt = None,
    png: reports.PngOpt = None,
    # --- hybrid projection (paraplan.measure.hybrid): measured layers of the target on the local device
    hybrid: Annotated[bool, Opt("--hybrid", help="measure the target's layers on a local device; upscale")] = False,
    device: Annotated[str | None, Opt("--device", help="hybrid device: cpu | cuda (default: the target's)")] = None,
    hybrid_cache: Annotated[str | None, Opt("--hybrid-cache", help="SQLite cache of hybrid measurements")] = None,
) -> None:
    """Project step time, throughput, MFU, the time breakdown and memory per GPU."""
    if not trace_max_mib > 0:  # NaN too
        raise ConfigError(f"--trace-max-mib must be > 0 (got {trace_max_mib})")
    check_outputs({"--trace": trace, "--emit-file": emit_file}, {"--chakra": chakra})
    if emit_format:
        canonical_format(emit_format, EMIT_FORMATS)  # an unknown format is refused before anything is printed
    reports.check(html, png)
    cfg = read_config_options(megatron_args, from_config, config_format, gpus, model)
    print_notes(cfg)
    params = ctx.params  # every option by parameter name; the tables say which spec field each one sets
    model_spec = model_with_config(cfg, model, spec_values(params, MODEL_OPTIONS))
    system = system_with_config(cfg, gpu, gpus, system_file, spec_values(params, SYSTEM_OPTIONS))
    train_values = spec_values(params, TRAINING_OPTIONS)
    if train_values.get("framework"):  # a name outside paraplan's list: its family's runtime, with a warning
        family = framework_family(str(train_values["framework"]))
        if family.warning:
            err_console.print(f"[yellow]note:[/] {escape(family.warning)}", highlight=False, soft_wrap=True)
        train_values["framework"] = family.framework
    train = training_with_config(cfg, config_file, dict(train_values))
    if framework_version:
        train = _with_release_defaults(
            train, train_values, framework_version, model_spec.is_moe, cfg, config_file, system.gpu.name
        )
    if vpp and vpp > 1 and schedule is None and train.pipeline_schedule == megatron_schedule(1).name:
        train = train.with_values(pipeline_schedule=megatron_schedule(vpp).name)  # as Megatron-LM picks it
    train = _default_global_batch(train, system, given=gbs is not None)
    fitted = fitted_profile(profile, system.gpu.name, analytic)
    if trace:  # a size the spec alone shows too large is refused before the simulation records it
        checked = check(model_spec, system, train)
        basis = expected_trace_basis(checked)
        check_trace_size(expected_trace_bytes(checked), trace_max_mib, "the trace", basis)
    if chakra:  # as --trace: refused before the projection prints anything
        from paraplan.formats.chakra import check_chakra_size

        check_chakra_size(model_spec, system, train, trace_max_mib)
    if hybrid and ctx.info_name == "project":
        from paraplan.cli.hybrid import hybrid_command

        kw = dict(device=device, cache_path=hybrid_cache, as_json=as_json, trace=trace, has_profile=fitted is not None)
        kw.update(trace_max_mib=trace_max_mib)
        if hybrid_command(model_spec, system, train, **kw):
            return
    record = bool(trace or html or png)
    result = project_specs(model_spec, system, train, ProjectionOptions(profile=fitted, record_events=record))
    if trace:
        write_trace(result, trace, trace_max_mib)
    if ctx.info_name == "memory":
        print_memory(result, as_json)
    else:
        print_projection(result, as_json)
    if emit_format or emit_file:
        text = emit_plan(emit_format or "megatron", result.model, result.system, result.train)
        if emit_file:
            Path(emit_file).write_text(text)
        else:
            (err_console if as_json else console).print(text, markup=False, highlight=False, soft_wrap=True, end="")
    if chakra:
        summary = export_plan_chakra(result.model, result.system, result.train, chakra, trace_max_mib)
        err_console.print(summary, highlight=False, markup=False, soft_wrap=True)
    reports.write("project_report", html, png, result)


def _default_global_batch(train: TrainingSpec, system: SystemSpec, given: bool) -> TrainingSpec:
    """No global batch given (neither --gbs nor a file: the spec's default 1): mbs*dp, Megatron-LM's own default
    (`global_batch_size = micro_batch_size * data_parallel_size` when unset, megatron/training/arguments.py), said in
    a note. A batch of 1 over several data-parallel ranks is never a legal layout, so nothing valid changes."""
    if given or train.gbs != TrainingSpec().gbs or min(train.tp, train.pp, train.cp, train.mbs) < 1:
        return train
    dp = resolve_dp(train, system).data_parallel_size or 0
    if dp < 1 or train.mbs * dp == train.gbs:
        return train
    err_console.print(
        f"note: no global batch given: gbs = mbs*dp = {train.mbs}*{dp} = {train.mbs * dp} (Megatron-LM's default); "
        "give --gbs for your run's batch",
        highlight=False,
    )
    return train.with_values(gbs=train.mbs * dp)


def _with_release_defaults(
    train: TrainingSpec,
    given: dict[str, object],
    version: str,
    moe: bool,
    cfg: object,
    config_file: str | None,
    gpu: str = "",
) -> TrainingSpec:
    """`train` with the defaults of its framework's release `version` (`paraplan.specs.frameworks`) on GPU preset
    `gpu` in the settings the options leave unset; says which it took."""
    if cfg is not None or config_file:
        raise ConfigError(
            "--framework-version fills the settings a plan given by options leaves unset; a config file states its own"
        )
    day = parse_version(version)
    era = defaults_on(train.framework, day)
    if era is None:
        raise ConfigError(f"--framework-version: no recorded defaults for framework '{train.framework}'")
    stated = {ALIASES.get(k, k) for k, v in given.items() if v is not None}
    values = era_training_values(train.framework, day, train.tp, train.precision, moe, gpu)
    taken = {k: v for k, v in values.items() if k not in stated}
    listed = ", ".join(f"{k}={v}" for k, v in taken.items())
    err_console.print(
        f"[yellow]note:[/] defaults of {escape(era.label)} ({escape(era.source)}): {escape(listed)}",
        highlight=False,
        soft_wrap=True,
    )
    return train.with_values(**taken)


def register(app: typer.Typer) -> None:
    show_spec_defaults(_projection_command)
    command = handle_errors(_projection_command)
    app.command("project")(command)
    app.command("memory", help="Memory per GPU by part, with the FITS/OOM verdict.")(command)
