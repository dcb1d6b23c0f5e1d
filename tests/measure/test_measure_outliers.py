"""The outlier rule on synthetic columns with planted defects."""

from __future__ import annotations

import numpy as np
import pytest

from paraplan.measure.outliers import (
    DEFECTIVE_FRACTION,
    MIN_ROWS_FOR_STATISTICS,
    clean_rows,
    statistical_outliers,
    work_slope,
)

pytest.importorskip("sklearn", reason="scikit-learn is not installed (the 'fit' extra)")


def grid(rows: int = 200, noise: float = 0.02, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A memory-bound op: time ~ tokens x dim plus a launch floor, with multiplicative noise."""
    rng = np.random.default_rng(seed)
    tokens = rng.choice([1024, 2048, 4096, 8192], rows)
    dim = rng.choice([1024, 2048, 4096, 8192], rows)
    shape = np.column_stack([tokens, dim]).astype(float)
    work = tokens * dim * 4.0
    time_us = (5 + work / 1e6) * np.exp(rng.normal(0, noise, rows))
    return shape, time_us, work


def test_clean_column_keeps_everything_but_planted_outliers() -> None:
    shape, time_us, work = grid()
    planted = [3, 50, 120]
    time_us[planted] *= [3.0, 0.2, 10.0]
    time_us[7] = -1.0
    time_us[8] = np.nan
    keep, counts = clean_rows(shape, time_us, work)
    assert counts.invalid == 2 and counts.statistical == 3 and not counts.rejected
    assert not keep[planted].any() and not keep[[7, 8]].any()
    assert keep.sum() == len(time_us) - 5 == len(time_us) - counts.dropped


def test_ordinary_noise_is_rarely_dropped() -> None:
    shape, time_us, work = grid(rows=400, noise=0.06)
    keep, counts = clean_rows(shape, time_us, work)
    assert counts.statistical <= 2 and not counts.rejected  # 25% is four standard deviations here


def test_backward_shorter_than_forward() -> None:
    shape, forward_us, work = grid()
    backward_us = 2 * forward_us
    backward_us[[1, 2]] = forward_us[[1, 2]] / 2
    keep, counts = clean_rows(shape, backward_us, work, forward_us)
    assert counts.physics == 2 and not keep[[1, 2]].any() and not counts.rejected
    broken = int(DEFECTIVE_FRACTION * len(forward_us)) + 1
    backward_us[:broken] = forward_us[:broken] / 10
    keep, counts = clean_rows(shape, backward_us, work, forward_us)
    assert counts.rejected and "backward shorter than forward" in counts.reason
    assert not keep.any() and counts.dropped == len(forward_us)


def test_scattered_column_is_rejected() -> None:
    shape, time_us, work = grid(noise=0.5)
    keep, counts = clean_rows(shape, time_us, work)
    assert counts.rejected and "scatter" in counts.reason and not keep.any()


def test_time_that_does_not_grow_with_work_is_rejected() -> None:
    shape, _, work = grid()
    flat = np.full(len(work), 117.0) * np.exp(np.random.default_rng(1).normal(0, 0.01, len(work)))
    keep, counts = clean_rows(shape, flat, work)
    assert counts.rejected and "does not grow" in counts.reason
    assert work_slope(work, 5 + work / 1e6) == pytest.approx(0.95, abs=0.05)  # the 5 us floor bends it
    assert work_slope(np.full(10, 3.0), np.ones(10)) is None  # no span: no verdict


def test_small_columns_skip_statistics() -> None:
    shape, time_us, work = grid(rows=MIN_ROWS_FOR_STATISTICS - 1)
    time_us[0] *= 5
    keep, counts = clean_rows(shape, time_us, work)
    assert counts.statistical == 0 and keep.all()


def test_modified_z_needs_a_real_deviation() -> None:
    residual = np.r_[np.zeros(50), 0.001 * np.arange(50), 0.15, 0.5]
    flagged = statistical_outliers(residual)
    assert flagged.tolist()[-2:] == [False, True]  # 0.15 is far in z but within 25%
