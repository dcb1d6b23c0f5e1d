"""The one torch harness of `paraplan.measure`: the machine (`device`) and the reference model (`reference`) that
the end-to-end run (`e2e`) and the hybrid projection's real runs (`hybrid.realrun`) both train."""

from __future__ import annotations

import pytest

from paraplan.measure import device
from paraplan.specs.system import SystemSpec


def test_cpu_gpu_spec_is_what_the_hybrid_path_recognises_as_a_cpu() -> None:
    gpu = device.cpu_gpu_spec(2, 2e11, 4e10, 8.0, "test")
    assert gpu.name == "cpu-2t" and gpu.bf16_tflops == gpu.fp16_tflops == 0.2 and gpu.hbm_tbps == 0.04
    system = SystemSpec(gpu=gpu, num_gpus=2, gpus_per_node=2, scale_up_gbps=1.0, nic_gbps=8.0)
    assert device.is_local_cpu(system)


def test_availability_answers_without_raising() -> None:
    assert isinstance(device.torch_available(), bool)
    assert isinstance(device.cuda_available(), bool)
    assert device.cuda_available() <= device.torch_available()


def test_torch_threads_restores_the_count() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed (the 'measure' extra)")
    before = torch.get_num_threads()
    with device.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with device.torch_threads(None):
        assert torch.get_num_threads() == before


def test_both_harnesses_train_one_reference_model() -> None:
    pytest.importorskip("torch", reason="torch is not installed (the 'measure' extra)")
    from paraplan.measure import e2e, layers
    from paraplan.measure.reference import TinyLlama, build_stage, flat_grad_buffer, parameter_count

    config = TinyLlama(vocab=128, hidden=32, layers=2, heads=4, kv_heads=2, ffn=48)
    run = e2e.RunConfig(batch=2, seq=16)
    model = e2e.build_model(config, run)
    assert all(isinstance(block, layers.DecoderLayer) for block in model.layers)
    assert isinstance(model.embedding, layers.Embedding) and isinstance(model.head, layers.Head)
    # the pipeline stages of the hybrid real run hold the same model, split
    two_stages = run.training_spec(1).with_values(pp=2, dp=1, gbs=2)
    stages = [build_stage(config.model_spec(), two_stages, stage) for stage in (0, 1)]
    assert stages[0].head is None and stages[1].embedding is None
    assert sum(parameter_count(s) for s in stages) == parameter_count(model)
    params = list(model.parameters())
    flat = flat_grad_buffer(params, params[0].dtype)
    assert flat.numel() == parameter_count(model)
    assert all(p.grad.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr() for p in params)


def test_one_rotary_over_queries_and_keys_rotates_each_at_its_position() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed (the 'measure' extra)")
    from paraplan.measure.layers import rotary_tables, rotate_half

    seq, dim = 6, 8
    cos, sin = rotary_tables(torch.arange(seq), dim)
    x = torch.randn(1, seq, 3, dim)
    out = rotate_half(x, cos, sin)
    # position p rotates each pair (i, i + dim/2) by p * base^(-2i/dim)
    p, i = 4, 1
    angle = p * 10000.0 ** (-2 * i / dim)
    a, b = x[0, p, 2, i], x[0, p, 2, i + dim // 2]
    expected = torch.tensor([a * torch.cos(torch.tensor(angle)) - b * torch.sin(torch.tensor(angle)),
                             b * torch.cos(torch.tensor(angle)) + a * torch.sin(torch.tensor(angle))])  # fmt: skip
    assert torch.allclose(out[0, p, 2, [i, i + dim // 2]], expected, atol=1e-5)
    assert torch.equal(out[:, 0], x[:, 0])  # position 0 is not rotated
