"""The outlier rule for measured samples, applied to each file and each direction (forward, backward).

Rows. A row's time is dropped when
1. invalid: it is not finite or not positive;
2. physically impossible (GEMM and attention files only): the backward is shorter than the forward. The
   backward of a GEMM is two GEMMs of the forward's FLOPs, that of flash attention about 2.5x its FLOPs
   (Dao 2023, "FlashAttention-2", section 3), so B < F cannot be a measurement of the same shape. Only
   the backward value is dropped;
3. a statistical outlier: its log-time residual against an out-of-fold prediction (a robust power law
   in the file's own shape columns and the work, plus median-loss gradient boosting on its residuals;
   5-fold, so no row predicts itself) has a
   modified z-score 0.6745 |r - median r| / MAD above 3.5 (Iglewicz and Hoaglin 1993, "How to Detect
   and Handle Outliers") and is more than 25% off that prediction, so that files with a very tight fit
   keep their ordinary noise. Columns with fewer than `MIN_ROWS_FOR_STATISTICS` rows skip this test.

Columns. A whole column (one file, one direction) is judged defective, and none of it used, when
a. more than 20% of its rows fail rule 2 (a systematic defect, not a few bad rows);
b. its typical scatter is above 10%: the median absolute log residual (MAD, rule 3) exceeds 0.1,
   i.e. repeated or neighbouring shapes do not reproduce (judged on columns of 150 rows or more:
   on fewer, the out-of-fold model is itself too coarse);
c. time does not grow with work: over the upper half of the column's work (FLOPs, bytes, parameters;
   all rows if that half spans less than 2x), the log-log slope of time against work is below 0.3.
   Compute- and memory-bound kernels and large collectives grow about linearly (slopes of 0.8-1.1 in
   every sound sample file).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFECTIVE_FRACTION = 0.2
MODIFIED_Z_LIMIT = 3.5
MIN_DEVIATION = 0.25  # relative to the out-of-fold prediction
MAX_SCATTER_MAD = 0.10  # of log residuals
MIN_WORK_SLOPE = 0.3
MIN_WORK_SPAN = 2.0  # the slope test needs work to span at least this factor
MIN_ROWS_FOR_STATISTICS = 20
MIN_ROWS_FOR_SCATTER = 150  # below this the out-of-fold model is too coarse to judge reproducibility
CV_FOLDS = 5

OUTLIER_RULE = (
    "per file and direction. Rows dropped: (1) non-finite or non-positive times; (2) GEMM/attention backward "
    "shorter than forward; (3) log-time residual vs a 5-fold out-of-fold prediction (Huber power law + "
    "median-loss gradient boosting on the file's shape columns and work) with modified z-score > "
    f"{MODIFIED_Z_LIMIT} (Iglewicz-Hoaglin) and more than {MIN_DEVIATION:.0%} off. Columns rejected whole: "
    f"(a) over {DEFECTIVE_FRACTION:.0%} of rows fail (2); (b) residual MAD > {MAX_SCATTER_MAD} (columns of "
    f"{MIN_ROWS_FOR_SCATTER}+ rows); (c) log-log slope of time vs work over the upper half of the work "
    f"< {MIN_WORK_SLOPE}"
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
    """Out-of-fold predictions of log time from log shape columns (K-fold): a robust (Huber) power law,
    plus median-loss gradient boosting on its residuals.

    `shape` should include the work (FLOPs, bytes) as a column: time is close to proportional to it, so
    the power law carries most of the variance and sparse files still get a sound prediction."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.linear_model import HuberRegressor
    from sklearn.model_selection import KFold
    from threadpoolctl import threadpool_limits

    features = np.log(np.maximum(shape, 1e-30)) if shape.shape[1] else np.zeros((len(log_time), 1))
    prediction = np.empty_like(log_time)
    # One thread: many short OpenMP regions stall badly on a shared, oversubscribed CPU.
    with threadpool_limits(limits=1):
        for train, test in KFold(n_splits=CV_FOLDS, shuffle=True, random_state=seed).split(features):
            power_law = HuberRegressor(max_iter=500).fit(features[train], log_time[train])
            residual = log_time[train] - power_law.predict(features[train])
            trees = HistGradientBoostingRegressor(
                loss="absolute_error", max_iter=100, learning_rate=0.2, min_samples_leaf=3, random_state=seed
            ).fit(features[train], residual)
            prediction[test] = power_law.predict(features[test]) + trees.predict(features[test])
    return prediction


def statistical_outliers(residual: np.ndarray) -> np.ndarray:
    """Boolean mask of outliers among log residuals (modified z-score and a minimum deviation)."""
    median = np.median(residual)
    mad = np.median(np.abs(residual - median))
    with np.errstate(divide="ignore", invalid="ignore"):
        modified_z = np.where(mad > 0, 0.6745 * np.abs(residual - median) / mad, np.inf)
    return (modified_z > MODIFIED_Z_LIMIT) & (np.abs(residual) > np.log1p(MIN_DEVIATION))


def work_slope(work: np.ndarray, time_us: np.ndarray) -> float | None:
    """Log-log slope of time against work over the upper half of the work (over all rows when the upper
    half spans less than `MIN_WORK_SPAN`), or None when the work spans less than that factor."""
    log_work, log_time = np.log(work), np.log(time_us)
    upper = work >= np.median(work)
    for rows in (upper, np.ones_like(upper)):
        if np.ptp(log_work[rows]) >= np.log(MIN_WORK_SPAN):
            return float(np.polyfit(log_work[rows], log_time[rows], 1)[0])
    return None


def clean_rows(
    shape: np.ndarray,
    time_us: np.ndarray,
    work: np.ndarray,
    forward_us: np.ndarray | None = None,
    seed: int = 0,
) -> tuple[np.ndarray, OutlierCounts]:
    """Apply the rule to one column. Returns (keep mask, counts).

    `shape`: the file's shape columns; `work`: FLOPs, bytes or parameters per row (for check c);
    `forward_us`: the forward times, given for a backward column of a GEMM or attention file (rule 2).
    """
    rows = len(time_us)
    keep = np.isfinite(time_us) & (time_us > 0)
    invalid = int(rows - keep.sum())

    def rejected(physics: int, statistical: int, reason: str) -> tuple[np.ndarray, OutlierCounts]:
        return np.zeros(rows, dtype=bool), OutlierCounts(rows, invalid, physics, statistical, True, reason)

    physics = 0
    if forward_us is not None:
        impossible = keep & np.isfinite(forward_us) & (time_us < forward_us)
        physics = int(impossible.sum())
        if physics > DEFECTIVE_FRACTION * rows:
            return rejected(physics, 0, f"backward shorter than forward in {physics} of {rows} rows")
        keep &= ~impossible
    statistical = 0
    if keep.sum() >= MIN_ROWS_FOR_STATISTICS:
        index = np.flatnonzero(keep)
        log_time = np.log(time_us[index])
        columns = np.column_stack([shape[index], work[index]])
        residual = log_time - out_of_fold_log_prediction(columns, log_time, seed)
        mad = float(np.median(np.abs(residual - np.median(residual))))
        if mad > MAX_SCATTER_MAD and len(index) >= MIN_ROWS_FOR_SCATTER:
            return rejected(physics, 0, f"scatter: median deviation {np.expm1(mad):.0%} between similar shapes")
        outlier = statistical_outliers(residual)
        statistical = int(outlier.sum())
        keep[index[outlier]] = False
    if keep.sum() >= 2:
        slope = work_slope(work[keep], time_us[keep])
        if slope is not None and slope < MIN_WORK_SLOPE:
            return rejected(physics, statistical, f"time does not grow with work (log-log slope {slope:.2f})")
    return keep, OutlierCounts(rows, invalid, physics, statistical)
