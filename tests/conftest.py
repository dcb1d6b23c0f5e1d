import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PARAPLAN_SHARED", REPO.parent / "shared"))
PUBLIC_CSV = SHARED / "data" / "measured" / "public.csv"
KERNEL_SAMPLES = SHARED / "data" / "kernel-samples"


@pytest.fixture
def public_csv() -> Path:
    if not PUBLIC_CSV.exists():
        pytest.skip(f"measured data not found at {PUBLIC_CSV}")
    return PUBLIC_CSV


@pytest.fixture
def kernel_samples() -> Path:
    if not (KERNEL_SAMPLES / "Perlmutter").is_dir():
        pytest.skip(f"kernel samples not found at {KERNEL_SAMPLES} (set PARAPLAN_SHARED)")
    return KERNEL_SAMPLES


@pytest.fixture(scope="session")
def public_report():
    """`validate_rows` over every public row (1-4 s): shared, read only, by the tests that score the whole file (each
    row is projected on its own, so a subset's result is this report's rows of that subset)."""
    from paraplan.validate.measured import read_rows
    from paraplan.validate.report import validate_rows

    if not PUBLIC_CSV.exists():
        pytest.skip(f"measured data not found at {PUBLIC_CSV}")
    return validate_rows(read_rows(PUBLIC_CSV))
