"""AMD Instinct presets against AMD's data sheets, in their architecture families (issue 32, item 7)."""

import pytest

from paraplan.cost.calibration import family_of, representative_gpu
from paraplan.specs.presets import gpu_preset_table, system_preset


def test_mi355x_is_the_mi350x_die_at_its_own_clock() -> None:
    """Same CDNA 4 die (256 CUs); the MI355X's 2,400 MHz peak engine clock against the MI350X's 2,200 MHz scales
    every matrix peak (AMD data sheets: 2.5 vs 2.3 PF dense BF16, 5.0 vs 4.6 PF FP8, 10.1 vs 9.2 PF MXFP4)."""
    fast, slow = gpu_preset_table("mi355x"), gpu_preset_table("mi350x")
    assert fast["sm_count"] == slow["sm_count"] == 256
    for dtype in ("bf16", "fp16", "fp8", "fp4"):
        assert fast["peak_tflops"][dtype] / slow["peak_tflops"][dtype] == pytest.approx(2400 / 2200, rel=2e-3)
    assert fast["peak_tflops"]["bf16"] == pytest.approx(2516.6, rel=1e-3)
    assert fast["peak_tflops"]["fp8"] == 2 * fast["peak_tflops"]["bf16"]


def test_infinity_fabric_per_direction() -> None:
    """7 links per GPU: 128 GB/s bidirectional each on CDNA 3 (896 GB/s), 153.6 GB/s on CDNA 4 (1,075 GB/s);
    the preset holds GB/s per direction."""
    assert system_preset("mi300x", 8).scale_up_gbps == pytest.approx(7 * 128 / 2)
    assert system_preset("mi355x", 8).scale_up_gbps == pytest.approx(7 * 153.6 / 2)


@pytest.mark.parametrize(
    ("gpu", "family"), [("mi300x", "cdna3"), ("mi325x", "cdna3"), ("mi350x", "cdna4"), ("mi355x", "cdna4")]
)
def test_families(gpu: str, family: str) -> None:
    assert family_of(gpu) == family


def test_representative_gpu_of_each_family() -> None:
    assert family_of(representative_gpu("cdna4")) == "cdna4"
    assert family_of(representative_gpu("hopper")) == "hopper"
    assert representative_gpu("not-a-family") == "not-a-family"
