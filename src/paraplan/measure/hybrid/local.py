"""A SystemSpec for the local CPU, so a CPU job (local processes over gloo) can be projected and compared.

Each "GPU" is one single-threaded process on its own core; all of them share one scale-up domain. The
peaks come from a quick matmul and copy on the machine: measured blocks replace the roofline, so they
matter little. The network fields are placeholders until `CommFit.apply` sets them from collectives timed
among the local processes.
"""

from __future__ import annotations

from paraplan.measure.device import DevicePeaks, LocalDevices, cpu_gpu_spec
from paraplan.specs.system import SystemSpec


def cpu_system(devices: LocalDevices, num_procs: int, peaks: DevicePeaks) -> SystemSpec:
    gpu = cpu_gpu_spec(
        devices.threads,
        peaks.matmul_flops_per_s,
        peaks.copy_bytes_per_s,
        devices.memory_bytes / 2**30,
        f"{devices.name}: one process of {devices.threads} thread(s); peaks measured (matmul, copy)",
    )
    return SystemSpec(
        gpu=gpu,
        num_gpus=num_procs,
        gpus_per_node=max(num_procs, devices.count),
        scale_up_gbps=1.0,  # placeholders: CommFit.apply sets the fitted values
        nic_gbps=8.0,
        scale_up_latency_us=100.0,
        nic_latency_us=100.0,
        name=f"local {devices.kind} ({devices.name})",
    )


def local_cpu_system(num_procs: int, threads: int = 1, cache_path: str | None = None) -> SystemSpec:
    """Detect this CPU, time its matmul and copy peaks (cached) and describe `num_procs` processes on it."""
    from paraplan.measure.device import detect, torch_threads
    from paraplan.measure.hybrid.bench import BENCH_VERSION, BenchSettings, time_peaks
    from paraplan.measure.hybrid.cache import MeasurementCache

    devices = detect("cpu", threads)
    cache = MeasurementCache(cache_path)
    software = {k: v for k, v in devices.software.items() if k == "torch"}
    key = {"dtype": "fp32", "v": BENCH_VERSION}
    row = cache.get(devices.key, "peaks", key, software)
    if row is None:
        with torch_threads(threads):
            peaks = time_peaks(BenchSettings("cpu", "fp32"))
        row = {"matmul_flops_per_s": peaks.matmul_flops_per_s, "copy_bytes_per_s": peaks.copy_bytes_per_s}
        cache.put(devices.key, "peaks", key, software, row)
    return cpu_system(devices, num_procs, DevicePeaks(row["matmul_flops_per_s"], row["copy_bytes_per_s"]))


def system_file_text(system: SystemSpec) -> str:
    """The YAML a `--system-file` needs to describe this (CPU) system."""
    g = system.gpu
    return (
        f"gpu:\n  name: {g.name}\n  bf16_tflops: {g.bf16_tflops:.4f}\n  hbm_gib: {g.hbm_gib:.1f}\n"
        f"  hbm_tbps: {g.hbm_tbps:.5f}\n  sm_count: {g.sm_count}\n"
        f"num_gpus: {system.num_gpus}\ngpus_per_node: {system.gpus_per_node}\n"
        f"scale_up_gbps: {system.scale_up_gbps}\nnic_gbps: {system.nic_gbps}\n"
    )
