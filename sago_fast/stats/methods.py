"""The statistical building blocks, each a thin, documented use of scipy.

The unit is the example: every function takes one value per example (an example's variants were already
reduced to its item score), so resampling examples is the item-clustered bootstrap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from sago_fast.kernels.resampling import bootstrap_moments, sign_flip_sums, stream_key
from sago_fast.stats.settings import StatsConfig


def is_binary(*arrays: np.ndarray) -> bool:
    """Whether every value of every array is 0 or 1 (correctness, one-variant flips)."""
    return all(bool(np.isin(a, (0.0, 1.0)).all()) for a in arrays)


def _finite(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return values[np.isfinite(values)]


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

    Fewer than two examples give no p-value; constant values the exact one-sided sign-flip p of n equal
    signs (0.5^n) when the value lies beyond the reference, else p = 1, and a zero-width CI, widened to
    reach the reference while that p does not reject (n < 6 at 95%): the CI agrees with the test."""
    x = _finite(values)
    if len(x) == 0:
        return MeanInference(float("nan"), float("nan"), float("nan"), None, "none")
    mean = float(x.mean())
    if is_binary(x) and len(x) >= 2:
        return _binomial_inference(x, config, reference, alternative)
    if len(x) < 2 or np.ptp(x) == 0:
        p, low, high = None, mean, mean
        if reference is not None and len(x) >= 2:
            beyond = mean > reference if alternative == "greater" else mean < reference
            p = 0.5 ** len(x) if beyond else 1.0  # the exact one-sided sign-flip p of n equal signs
            if (
                beyond and p >= (1.0 - config.confidence) / 2
            ):  # too few equal values to reject: nor does the CI
                low, high = min(mean, reference), max(mean, reference)
        return MeanInference(mean, low, high, p, "constant")
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


SE_FLOOR = 1e-9  # a resample's standard error below this share of the data's scale is no spread at all


def _studentized_bootstrap(
    x: np.ndarray, config: StatsConfig, reference: float | None, alternative: str, stream: int
) -> MeanInference:
    """Bootstrap-t: t* = (mean* - mean) / se* over resamples of examples; CI = mean - t*_q se; the
    p-value is the share of t* at least as extreme as (mean - reference) / se (+1 smoothing).

    Every resample's figures are finite: one with no spread of its own (a single repeated value, sparse
    0/k data) is scaled by the sample's se. "No spread" is relative to the data's scale
    (``SE_FLOOR`` × the largest magnitude): a repeated value that is not exactly representable has a
    rounding spread of ~1e-16, not 0, which would otherwise give t* of ~1e15."""
    n = len(x)
    mean, se = float(x.mean()), float(x.std(ddof=1) / np.sqrt(n))
    floor = SE_FLOOR * float(np.max(np.abs(x)))
    # each resample's sum and sum of squares of the centred values (one pass, no (B, n) array)
    sums, squares = bootstrap_moments(x - mean, config.n_resamples, stream_key(config.seed, stream))
    shift = sums / n  # mean* - mean
    s = np.sqrt(np.maximum(squares - sums * shift, 0.0) / (n - 1) / n)
    # a resample of one repeated value has no spread of its own: it is scaled by the sample's
    t_star = shift / np.where(s > floor, s, se)
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


SIGN_FLIP_EXACT_N = 12  # up to this many examples every one of the 2^n sign vectors is enumerated
SIGN_FLIP_TEST = "paired sign-flip permutation"
PAIRED_TEST = "paired sign-flip and studentized bootstrap"


def paired_mean_difference(
    a: np.ndarray, b: np.ndarray, config: StatsConfig, *, stream: int = 0
) -> MeanInference:
    """Two-sided test of H0: mean(a - b) = 0 over examples (aligned by example) and the CI of the mean
    difference, for every paired metric (0/1 accuracy included): significant only when both the sign-flip
    permutation test (:func:`paired_sign_flip`: exact for symmetric differences, however sparse, tied or
    heavy-tailed) and the studentized bootstrap of the differences (:func:`_studentized_bootstrap`, at its
    level for skewed differences of mean 0, which a sign-flip test is not) reject, in the same direction.
    So its level is at most the smaller of theirs wherever either holds: p = the larger of the two
    p-values; CI = the hull of the two intervals, each the inversion of its own test, so the CI excludes 0
    exactly when p < 1 - confidence.

    Differences on two values (a step that some examples take and others do not; one repeated value counts
    with 0, no change, as the other) also get the exact binomial interval of :func:`two_point_inference`,
    in the hull and in p: inverting a sign-flip test at a shift assumes differences symmetric about it,
    which two values are not, and with few examples off the step the bootstrap sees no spread (60 values
    of 0.5 gave [0.5, 0.5]). Bounds stay within the differences' support (and 0, where the test does not
    reject)."""
    flip = paired_sign_flip(a, b, config, stream=stream)
    d = _finite(rounded_differences(a, b))
    two_point = two_point_inference(d, config.confidence)
    if flip.p_value is None:
        return flip
    parts = [flip] + ([two_point] if two_point is not None else [])
    if np.ptp(d) > 0:
        parts.append(_studentized_bootstrap(d, config, 0.0, "two-sided", stream))
    if len(parts) == 1:
        return flip
    level = 1.0 - config.confidence
    low, high = min(part.low for part in parts), max(part.high for part in parts)
    p = max(1.0 if part.p_value is None else part.p_value for part in parts)
    support = [float(d.min()), float(d.max())] + ([0.0] if np.ptp(d) == 0 else [])
    floor, ceiling = min(support), max(support)  # the mean difference cannot lie beyond them
    if p >= level:
        floor, ceiling = min(floor, 0.0), max(ceiling, 0.0)
    low, high = min(max(low, floor), ceiling), max(min(high, ceiling), floor)
    method = PAIRED_TEST if two_point is None else f"{PAIRED_TEST} and exact two-point"
    return MeanInference(flip.estimate, low, high, p, method)


def two_point_inference(d: np.ndarray, confidence: float) -> MeanInference | None:
    """The exact interval and two-sided test of the mean of differences that take two values ``lo < hi``
    (or one value c != 0, taken with 0 as the other), or None for any other support.

    The mean is lo + (hi - lo) q with q the share at ``hi``: the Clopper–Pearson interval of q
    (``scipy.stats.binomtest``), mapped back, and the central binomial p-value of the q that makes the mean
    0 (the test the interval inverts; 0 when that q is 0 or 1 and an example lies off it, None when 0 lies
    outside the support)."""
    values = np.unique(d)
    if len(values) == 1 and values[0] != 0.0:
        values = np.sort(np.append(values, 0.0))
    if len(values) != 2:
        return None
    lo, hi = float(values[0]), float(values[1])
    n, k = len(d), int(np.sum(d == hi))
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    null_share = -lo / (hi - lo)
    if null_share < 0.0 or null_share > 1.0:
        p = None
    elif null_share in (0.0, 1.0):
        p = 1.0 if k == round(null_share * n) else 0.0
    else:
        tails = stats.binom.cdf(k, n, null_share), stats.binom.sf(k - 1, n, null_share)
        p = float(min(1.0, 2.0 * min(tails)))
    mean = lo + (hi - lo) * k / n
    return MeanInference(
        mean, lo + (hi - lo) * float(ci.low), lo + (hi - lo) * float(ci.high), p, "exact two-point"
    )


def paired_sign_flip(a: np.ndarray, b: np.ndarray, config: StatsConfig, *, stream: int = 0) -> MeanInference:
    """Two-sided sign-flip permutation test of H0: mean(a - b) = 0 over examples (aligned by example), and
    the CI of the mean difference by inverting the same test: one procedure for every paired metric,
    0/1 outcomes included (on paired 0/1 values it is McNemar's test: only discordant examples move).

    Under H0, a and b are exchangeable within an example, so each difference is as likely negated: the
    reference distribution is the mean difference under random sign vectors (all 2^n of them for n <=
    ``SIGN_FLIP_EXACT_N``, else ``config.n_resamples`` drawn, seeded, with the (1 + count) / (B + 1) p).
    Exact at any n for steps, ties, sparse and heavy-tailed differences (studentizing changes nothing:
    a sign flip keeps the sum of squares, so |t| orders the vectors as |mean| does). The CI is every shift
    delta whose test of mean = delta does not reject at 1 - confidence, searched within the hull of the
    data's range and 0; 0 is one of the points tried, so the CI excludes 0 exactly when p < 1 - confidence.
    Constant differences get the exact p of n equal signs (2 / 2^n) and a zero-width CI once that rejects
    (n >= 6 at 95%); below, the CI reaches 0.
    Differences are rounded first (:func:`rounded_differences`) so float noise is no difference."""
    d = _finite(rounded_differences(a, b))
    n = len(d)
    if n == 0:
        return MeanInference(float("nan"), float("nan"), float("nan"), None, "none")
    mean = float(d[0]) if np.ptp(d) == 0 else float(d.mean())  # (a mean of copies may differ by 1 ulp)
    if n < 2:
        return MeanInference(mean, mean, mean, None, "none")
    flipped_sums, flipped_counts, exact = _sign_flip_sums(d, config, stream)
    total, scale = float(d.sum()), float(np.abs(d).sum()) + 1e-300

    def p_at(delta: float) -> float:
        observed = abs(total - n * delta)
        moved = np.abs(flipped_sums - delta * flipped_counts)
        count = int(np.sum(moved >= observed - 1e-9 * (scale + n * abs(delta))))
        return count / len(moved) if exact else (1 + count) / (len(moved) + 1)

    level = 1.0 - config.confidence
    # searched within the differences' range and 0: with few examples of one sign, 0 is not rejected
    low = _accepted_bound(p_at, level, mean, min(float(d.min()), 0.0))
    high = _accepted_bound(p_at, level, mean, max(float(d.max()), 0.0))
    p = min(1.0, p_at(0.0))
    if np.ptp(d) == 0:  # every shift but the value itself moves all n signs together
        return MeanInference(
            mean,
            min(mean, 0.0) if p >= level else mean,
            max(mean, 0.0) if p >= level else mean,
            p,
            "constant",
        )
    return MeanInference(mean, low, high, p, SIGN_FLIP_TEST)


def _sign_flip_sums(d: np.ndarray, config: StatsConfig, stream: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """Per sign vector s: (s · d, s · 1), over all 2^n vectors (exact) or config.n_resamples seeded draws."""
    n = len(d)
    if n <= SIGN_FLIP_EXACT_N:
        signs = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2.0 - 1.0  # (2^n, n)
        return signs @ d, signs.sum(axis=1), True
    sums, counts = sign_flip_sums(d, config.n_resamples, stream_key(config.seed, stream))
    return sums, counts, False


def _accepted_bound(p_at, level: float, inside: float, edge: float) -> float:
    """The last shift from ``inside`` (the mean: p = 1) towards ``edge`` (the data's extreme) whose test
    does not reject at ``level``, by bisection; 0 is tried first where it lies on the way, so the interval
    contains 0 exactly when the test of 0 does not reject."""
    if p_at(edge) >= level:
        return edge
    outside = edge
    if min(inside, outside) < 0.0 < max(inside, outside):
        if p_at(0.0) >= level:
            inside = 0.0
        else:
            outside = 0.0
    width = abs(edge - inside) + 1e-300
    for _ in range(200):
        if abs(outside - inside) <= 1e-12 * width:
            break
        middle = (inside + outside) / 2
        if p_at(middle) >= level:
            inside = middle
        else:
            outside = middle
    return inside


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


def comparison_significant(
    sequential: bool, p_adjusted: float | None, low: float | None, high: float | None, alpha: float
) -> bool:
    """One rule for a paired comparison, wherever it is read (``checkpoint_changes``, ``rank_reversals``):
    a fixed-n test is significant when its BH-adjusted p is below ``alpha``; a sequential one
    (``--until-separated``, no p-value) when its anytime-valid sequence, built at the family's share of
    alpha (Bonferroni over the run's comparisons and followed metrics), excludes 0."""
    if sequential:
        return low is not None and high is not None and (low > 0 or high < 0)
    return p_adjusted is not None and p_adjusted < alpha


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


PERMUTATION_MAX_N = 1000  # above this many examples a correlation's p-value is scipy's t-based one


def correlation_permutation_p(x: np.ndarray, y: np.ndarray, config: StatsConfig, *, stream: int = 0) -> float:
    """Two-sided permutation p-value of the Pearson correlation of x and y (pairings permuted;
    ``scipy.stats.permutation_test``). Apply to ranks for Spearman, to residuals for partial correlations.

    Above ``PERMUTATION_MAX_N`` examples, ``scipy.stats.pearsonr``'s p-value (the t distribution with n - 2
    degrees of freedom) instead: there the permutation distribution of r is normal to within its own
    resampling error, and 2,000 permutations of 13,000 examples cost 2 s a correlation (a training run of
    100 checkpoints has 1,200 of them)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    if len(x) > PERMUTATION_MAX_N:
        return float(stats.pearsonr(x, y).pvalue)

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
