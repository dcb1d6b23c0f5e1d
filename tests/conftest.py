import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PARAPLAN_SHARED", REPO.parent / "shared"))
PUBLIC_CSV = SHARED / "data" / "measured" / "public.csv"


@pytest.fixture
def public_csv() -> Path:
    if not PUBLIC_CSV.exists():
        pytest.skip(f"measured data not found at {PUBLIC_CSV}")
    return PUBLIC_CSV
