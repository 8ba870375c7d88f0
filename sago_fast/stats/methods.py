"""The statistical building blocks, each a thin, documented use of scipy.

The unit is the example: every function takes one value per example (an example's variants were already
reduced to its item score), so resampling examples is the item-clustered bootstrap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from sago_fast.stats.config import StatsConfig


def is_binary(*arrays: np.ndarray) -> bool:
    """Whether every value of every array is 0 or 1 (correctness, one-variant flips)."""
    return all(bool(np.isin(a, (0.0, 1.0)).all()) for a in arrays)


def _finite(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return values[np.isfinite(values)]


def bootstrap_ci(
    values: np.ndarray, config: StatsConfig, statistic=np.mean, *, stream: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap CI of ``statistic`` over examples (``scipy.stats.bootstrap``), seeded by
    (config.seed, stream). Fewer than two examples or constant values give a zero-width interval."""
    x = _finite(values)
    if len(x) == 0:
        return float("nan"), float("nan")
    if len(x) < 2 or np.ptp(x) == 0:
        value = float(statistic(x))
        return value, value
    result = stats.bootstrap(
        (x,),
        statistic,
        n_resamples=config.n_resamples,
        confidence_level=config.confidence,
        method="percentile",
        rng=np.random.default_rng([config.seed, stream]),
        vectorized=True if statistic is np.mean else False,
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


@dataclass(frozen=True)
class MeanInference:
    """The mean of one value per example, its CI, and a one-sided test of the mean against a reference.

    method: ``exact binomial`` (every value 0 or 1: Clopper–Pearson CI, ``scipy.stats.binomtest``) or
    ``studentized bootstrap`` (bootstrap-t: CI and p-value from the same resamples of examples, so the
    test rejects at level a/2 exactly when the (1 - a) CI lies beyond the reference)."""

    estimate: float
    low: float
    high: float
    p_value: float | None
    method: str


def mean_inference(
    values: np.ndarray,
    config: StatsConfig,
    *,
    reference: float | None = None,
    alternative: str = "greater",
    stream: int = 0,
) -> MeanInference:
    """Estimate, CI and (with ``reference``) the one-sided p-value of H0: mean <= reference (alternative
    ``greater``) or mean >= reference (``less``). A test of the mean, the figure that is reported: unlike
    a signed-rank test (pseudo-median), it respects the reference on discrete and skewed values.

    Fewer than two examples give no p-value; constant values a zero-width CI and p = 1 unless the value
    lies beyond the reference, then the smallest p the resampling can give."""
    x = _finite(values)
    if len(x) == 0:
        return MeanInference(float("nan"), float("nan"), float("nan"), None, "none")
    mean = float(x.mean())
    if is_binary(x) and len(x) >= 2:
        return _binomial_inference(x, config, reference, alternative)
    if len(x) < 2 or np.ptp(x) == 0:
        p = None
        if reference is not None and len(x) >= 2:
            beyond = mean > reference if alternative == "greater" else mean < reference
            p = 1.0 / (config.n_resamples + 1) if beyond else 1.0
        return MeanInference(mean, mean, mean, p, "constant")
    return _studentized_bootstrap(x, config, reference, alternative, stream)


def _binomial_inference(
    x: np.ndarray, config: StatsConfig, reference: float | None, alternative: str
) -> MeanInference:
    k, n = int(x.sum()), len(x)
    result = stats.binomtest(k, n)
    ci = result.proportion_ci(confidence_level=config.confidence, method="exact")
    p = None
    if reference is not None:
        if reference <= 0.0 or reference >= 1.0:  # a degenerate null: any success (failure) rejects it
            beyond = k > reference * n if alternative == "greater" else k < reference * n
            p = 0.0 if beyond else 1.0
        else:
            p = float(stats.binomtest(k, n, reference, alternative=alternative).pvalue)
    return MeanInference(k / n, float(ci.low), float(ci.high), p, "exact binomial")


BOOTSTRAP_CHUNK = 256  # resamples drawn at once (memory: chunk x n examples)


def _studentized_bootstrap(
    x: np.ndarray, config: StatsConfig, reference: float | None, alternative: str, stream: int
) -> MeanInference:
    """Bootstrap-t: t* = (mean* - mean) / se* over resamples of examples; CI = mean - t*_q se; the
    p-value is the share of t* at least as extreme as (mean - reference) / se (+1 smoothing).

    Every resample's figures are finite: one made of a single repeated value (sparse 0/k data) is scaled
    by the sample's se instead of its own zero spread."""
    n = len(x)
    rng = np.random.default_rng([config.seed, stream])
    mean, se = float(x.mean()), float(x.std(ddof=1) / np.sqrt(n))
    t_star = np.empty(config.n_resamples)
    for start in range(0, config.n_resamples, BOOTSTRAP_CHUNK):
        size = min(BOOTSTRAP_CHUNK, config.n_resamples - start)
        draws = x[rng.integers(0, n, (size, n))]  # (size, n)
        m = draws.mean(axis=1)
        s = draws.std(axis=1, ddof=1) / np.sqrt(n)
        # a resample of one repeated value has no spread of its own: it is scaled by the sample's
        t_star[start : start + size] = (m - mean) / np.where(s > 0, s, se)
    t_low, t_high = _inverted_test_bounds(t_star, 1.0 - config.confidence)
    low, high = mean - t_high * se, mean - t_low * se
    p = None
    if reference is not None:
        t0 = (mean - reference) / se
        greater = float((1 + np.sum(t_star >= t0)) / (config.n_resamples + 1))
        less = float((1 + np.sum(t_star <= t0)) / (config.n_resamples + 1))
        if alternative == "two-sided":
            p = min(1.0, 2 * min(greater, less))
        else:
            p = greater if alternative == "greater" else less
    return MeanInference(mean, float(low), float(high), p, "studentized bootstrap")


def _inverted_test_bounds(t_star: np.ndarray, alpha: float) -> tuple[float, float]:
    """The resampled t values that bound the (1 - alpha) interval, chosen as the inversion of the test
    above: a reference lies outside the interval exactly when its one-sided p-value (1 + #extreme) / (B + 1)
    is below alpha / 2. With m the smallest count of extreme resamples whose p-value (1 + m) / (B + 1) is
    not below alpha / 2, the bounds are the m-th smallest and m-th largest t* (equal-tailed). So a CI
    wholly beyond the reference has p < alpha / 2, exactly, whatever B."""
    b = len(t_star)
    m = math.ceil(alpha / 2 * (b + 1) - 1 - 1e-9)  # smallest #extreme whose p is >= alpha / 2
    m = min(max(m, 1), b)
    ordered = np.sort(t_star)
    return float(ordered[m - 1]), float(ordered[b - m])


def paired_mean_difference(
    a: np.ndarray, b: np.ndarray, config: StatsConfig, *, stream: int = 0
) -> MeanInference:
    """Two-sided test of H0: mean(a - b) = 0 over examples (aligned by example), with the CI of the mean
    difference from the same resamples: the studentized bootstrap of the paired differences (rounded,
    :func:`rounded_differences`, so float noise is no difference). It tests the mean difference that is
    reported, unlike a signed-rank test (the pseudo-median: skewed differences of equal mean were
    "significant" 29% of the time at n = 60); p < alpha exactly when the (1 - alpha) CI excludes 0."""
    d = _finite(rounded_differences(a, b))
    if len(d) == 0:
        return MeanInference(float("nan"), float("nan"), float("nan"), None, "none")
    mean = float(d.mean())
    if len(d) < 2 or np.ptp(d) == 0:
        p = None if len(d) < 2 else (1.0 if mean == 0 else 2.0 / (config.n_resamples + 1))
        return MeanInference(mean, mean, mean, p, "constant")
    return _studentized_bootstrap(d, config, 0.0, "two-sided", stream)


RELATIVE_ROUNDING = 1e-12  # differences this small relative to the values are ties (zero), not signs


def rounded_differences(a: np.ndarray, b: np.ndarray | float = 0.0) -> np.ndarray:
    """a - b rounded to 1e-12 of the largest magnitude involved, so that float noise neither creates
    signs from exact ties nor breaks the symmetry of values mirrored around the null before ranking."""
    a = np.asarray(a, dtype=np.float64)
    b = np.broadcast_to(np.asarray(b, dtype=np.float64), a.shape)
    d = a - b
    scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(b), initial=0.0)), 1e-300)
    step = scale * RELATIVE_ROUNDING
    return np.round(d / step) * step


def mcnemar_p(flips_a: np.ndarray, flips_b: np.ndarray) -> float:
    """Exact McNemar test on paired binary indicators: a binomial test on the discordant pairs."""
    a = np.asarray(flips_a, dtype=bool)
    b = np.asarray(flips_b, dtype=bool)
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    if only_a + only_b == 0:
        return 1.0
    return float(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue)


def bh_adjust(p_values: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (``scipy.stats.false_discovery_control``); NaN stays NaN."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full_like(p, np.nan)
    ok = np.isfinite(p)
    if ok.any():
        out[ok] = stats.false_discovery_control(p[ok], method="bh")
    return out


def kendall_w(ranks: np.ndarray) -> tuple[float, float]:
    """Kendall's coefficient of concordance of m raters (rows) ranking n items (columns), with the tie
    correction, and its chi-square p-value (df = n - 1). ``ranks`` (m, n) are average ranks per row."""
    ranks = np.asarray(ranks, dtype=np.float64)
    m, n = ranks.shape
    if m < 2 or n < 2:
        return float("nan"), float("nan")
    totals = ranks.sum(axis=0)
    s = float(((totals - totals.mean()) ** 2).sum())
    ties = 0.0
    for row in ranks:
        _, counts = np.unique(row, return_counts=True)
        ties += float((counts**3 - counts).sum())
    denominator = m**2 * (n**3 - n) - m * ties
    if denominator <= 0:
        return float("nan"), float("nan")
    w = 12 * s / denominator
    chi2 = m * (n - 1) * w
    return float(w), float(stats.chi2.sf(chi2, n - 1))


def kendall_tau_b_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Kendall tau_b between a[i] and b[i] for every row i at once (bootstrap draws of model means).

    tau_b = sum_{j<k} s_a s_b / sqrt(sum s_a^2 * sum s_b^2) with s = sign of the pair difference; equals
    ``scipy.stats.kendalltau`` row by row (tested) without a Python loop over draws. NaN where a row is
    constant."""
    j, k = np.triu_indices(a.shape[1], 1)
    sa = np.sign(a[:, j] - a[:, k])  # (B, pairs)
    sb = np.sign(b[:, j] - b[:, k])
    denominator = np.sqrt((sa**2).sum(axis=1) * (sb**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, (sa * sb).sum(axis=1) / denominator, np.nan)


def nemenyi_cd(n_models: int, n_items: int, alpha: float) -> float:
    """Nemenyi critical difference of mean ranks: q_alpha(k, inf) / sqrt(2) * sqrt(k (k + 1) / (6 N)),
    with q from ``scipy.stats.studentized_range``."""
    if n_models < 2 or n_items < 1:
        return float("nan")
    q = stats.studentized_range.ppf(1 - alpha, n_models, np.inf)
    return float(q / np.sqrt(2) * np.sqrt(n_models * (n_models + 1) / (6 * n_items)))


def partial_spearman(x: np.ndarray, y: np.ndarray, covariates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Residuals of rank(x) and rank(y) after a least-squares fit on [1, rank(covariates)]: their Pearson
    correlation is the partial Spearman correlation. covariates: (n, c)."""
    design = np.column_stack([np.ones(len(x))] + [stats.rankdata(c) for c in np.asarray(covariates).T])
    rx, ry = stats.rankdata(x), stats.rankdata(y)
    res_x = rx - design @ np.linalg.lstsq(design, rx, rcond=None)[0]
    res_y = ry - design @ np.linalg.lstsq(design, ry, rcond=None)[0]
    return res_x, res_y


def correlation_permutation_p(x: np.ndarray, y: np.ndarray, config: StatsConfig, *, stream: int = 0) -> float:
    """Two-sided permutation p-value of the Pearson correlation of x and y (pairings permuted;
    ``scipy.stats.permutation_test``). Apply to ranks for Spearman, to residuals for partial correlations."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")

    def statistic(a: np.ndarray, axis: int = -1) -> np.ndarray:
        a_c = a - a.mean(axis=axis, keepdims=True)
        y_c = y - y.mean()
        return (a_c * y_c).sum(axis=axis) / np.sqrt((a_c**2).sum(axis=axis) * (y_c**2).sum())

    result = stats.permutation_test(
        (x,),
        statistic,
        permutation_type="pairings",
        n_resamples=config.n_resamples,
        alternative="two-sided",
        vectorized=True,
        rng=np.random.default_rng([config.seed, stream]),
    )
    return float(result.pvalue)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(stats.pearsonr(x, y).statistic)
