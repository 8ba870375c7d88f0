"""The statistical building blocks, each a thin, documented use of scipy.

The unit is the example: every function takes one value per example (an example's variants were already
reduced to its item score), so resampling examples is the item-clustered bootstrap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from sago_fast.errors import InputError


@dataclass(frozen=True)
class StatsConfig:
    """n_resamples: bootstrap draws (and permutations); seed: every random stream derives from it;
    confidence: CI level; alpha: significance level for reversals and tables; tolerance: the stated
    tolerance discrete instability metrics are tested against (share of pairs / variants)."""

    n_resamples: int = 2000
    seed: int = 0
    confidence: float = 0.95
    alpha: float = 0.05
    tolerance: float = 0.05

    def __post_init__(self) -> None:
        if self.n_resamples < 100:
            raise InputError("n_resamples must be at least 100")
        if not 0 < self.confidence < 1 or not 0 < self.alpha < 1:
            raise InputError("confidence and alpha must lie in (0, 1)")


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


def paired_bootstrap_ci(
    a: np.ndarray, b: np.ndarray, config: StatsConfig, *, stream: int = 0
) -> tuple[float, float]:
    """CI of mean(a - b) over examples (both arrays aligned by example)."""
    return bootstrap_ci(np.asarray(a, float) - np.asarray(b, float), config, stream=stream)


def wilcoxon_p(differences: np.ndarray, alternative: str) -> float:
    """One-sample Wilcoxon signed-rank p-value of ``differences`` (``scipy.stats.wilcoxon``).

    Zero differences are dropped (Wilcoxon's convention); when nothing is left, there is no evidence
    either way and p = 1."""
    d = _finite(differences)
    d = d[d != 0]
    if len(d) == 0:
        return 1.0
    return float(stats.wilcoxon(d, alternative=alternative, zero_method="wilcox").pvalue)


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
