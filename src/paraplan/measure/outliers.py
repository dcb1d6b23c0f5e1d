"""The outlier rule for measured samples, applied to each file and each direction (forward, backward).

A row's time is dropped when
1. invalid: it is not finite or not positive;
2. physically impossible (GEMM and attention files only): the backward is shorter than the forward. The
   backward of a GEMM is two GEMMs of the forward's FLOPs, that of flash attention about 2.5x its FLOPs
   (Dao 2023, "FlashAttention-2", section 3.1), so B < F cannot be a real measurement of the same shape.
   Only the backward value is dropped. When more than `DEFECTIVE_FRACTION` of a file's rows fail, the
   column as a whole is judged defective (not a few bad rows) and none of it is used;
3. a statistical outlier: its log-time residual against an out-of-fold prediction (a gradient-boosted
   model of the file's own shape columns, 5-fold, so no row predicts itself) has a modified z-score
   0.6745 (r - median r) / MAD above 3.5 (Iglewicz and Hoaglin 1993, "How to Detect and Handle
   Outliers") and the row is more than `MIN_DEVIATION` away from that prediction (so that files with a
   very tight fit do not lose rows for ordinary noise). Files with fewer than `MIN_ROWS_FOR_STATISTICS`
   rows skip this test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFECTIVE_FRACTION = 0.2
MODIFIED_Z_LIMIT = 3.5
MIN_DEVIATION = 0.10  # relative to the out-of-fold prediction
MIN_ROWS_FOR_STATISTICS = 20
CV_FOLDS = 5

OUTLIER_RULE = (
    "per file and direction: drop (1) non-finite or non-positive times; (2) GEMM/attention rows whose backward "
    f"is shorter than the forward (the column is rejected whole if over {DEFECTIVE_FRACTION:.0%} of rows fail); "
    "(3) rows whose log-time residual vs a 5-fold out-of-fold gradient-boosting prediction from the file's "
    f"shape columns has modified z-score > {MODIFIED_Z_LIMIT} (Iglewicz-Hoaglin) and deviates by more than "
    f"{MIN_DEVIATION:.0%}"
)


@dataclass(frozen=True, slots=True)
class OutlierCounts:
    rows: int
    invalid: int = 0
    physics: int = 0
    statistical: int = 0
    rejected: bool = False  # the whole column was judged defective
    reason: str = ""

    @property
    def dropped(self) -> int:
        return self.rows if self.rejected else self.invalid + self.physics + self.statistical


def out_of_fold_log_prediction(shape: np.ndarray, log_time: np.ndarray, seed: int = 0) -> np.ndarray:
    """Out-of-fold predictions of log time from log shape columns (gradient boosting, K-fold)."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.model_selection import KFold, cross_val_predict

    features = np.log(np.maximum(shape, 1e-30)) if shape.size else np.zeros((len(log_time), 1))
    model = HistGradientBoostingRegressor(max_iter=200, learning_rate=0.1, min_samples_leaf=5, random_state=seed)
    folds = KFold(n_splits=CV_FOLDS, shuffle=True, random_state=seed)
    return cross_val_predict(model, features, log_time, cv=folds)


def statistical_outliers(residual: np.ndarray) -> np.ndarray:
    """Boolean mask of outliers among log residuals (modified z-score with a minimum deviation)."""
    median = np.median(residual)
    mad = np.median(np.abs(residual - median))
    if mad == 0:
        modified_z = np.where(residual == median, 0.0, np.inf)
    else:
        modified_z = 0.6745 * np.abs(residual - median) / mad
    return (modified_z > MODIFIED_Z_LIMIT) & (np.abs(np.expm1(residual)) > MIN_DEVIATION)


def clean_rows(
    shape: np.ndarray,
    time_us: np.ndarray,
    forward_us: np.ndarray | None = None,
    seed: int = 0,
) -> tuple[np.ndarray, OutlierCounts]:
    """Apply the rule to one file's column. Returns (keep mask, counts).

    `forward_us` is given for a backward column of a GEMM or attention file (the physics check).
    """
    rows = len(time_us)
    keep = np.isfinite(time_us) & (time_us > 0)
    invalid = int(rows - keep.sum())
    physics = 0
    if forward_us is not None:
        impossible = keep & np.isfinite(forward_us) & (time_us < forward_us)
        physics = int(impossible.sum())
        if physics > DEFECTIVE_FRACTION * rows:
            reason = f"backward shorter than forward in {physics} of {rows} rows"
            return np.zeros(rows, dtype=bool), OutlierCounts(rows, invalid, physics, 0, True, reason)
        keep &= ~impossible
    statistical = 0
    if keep.sum() >= MIN_ROWS_FOR_STATISTICS:
        index = np.flatnonzero(keep)
        log_time = np.log(time_us[index])
        residual = log_time - out_of_fold_log_prediction(shape[index], log_time, seed)
        outlier = statistical_outliers(residual)
        statistical = int(outlier.sum())
        keep[index[outlier]] = False
    return keep, OutlierCounts(rows, invalid, physics, statistical)
