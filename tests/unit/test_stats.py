"""Statistics against scipy / hand-computed values, determinism, and planted truths (with false-positive rates)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from sago_fast.stats import StatsConfig, compute_stats
from sago_fast.stats.data import RunData
from sago_fast.stats.methods import (
    bh_adjust,
    bootstrap_ci,
    correlation_permutation_p,
    kendall_tau_b_rows,
    kendall_w,
    mcnemar_p,
    nemenyi_cd,
    partial_spearman,
    wilcoxon_p,
)

FAST = StatsConfig(n_resamples=300, seed=0)


# --- building blocks ----------------------------------------------------------------------------------


def test_bootstrap_ci_is_scipy_percentile_bootstrap_and_seeded():
    x = np.random.default_rng(1).normal(0.3, 1.0, 50)
    config = StatsConfig(n_resamples=2000, seed=7)
    low, high = bootstrap_ci(x, config, stream=3)
    ref = stats.bootstrap(
        (x,), np.mean, n_resamples=2000, method="percentile", rng=np.random.default_rng([7, 3])
    ).confidence_interval
    assert (low, high) == pytest.approx((ref.low, ref.high))
    assert bootstrap_ci(x, config, stream=3) == (low, high)  # same seed, same interval
    assert bootstrap_ci(x, config, stream=4) != (low, high)
    # close to the normal-theory interval on normal data
    half = 1.96 * x.std(ddof=1) / math.sqrt(len(x))
    assert low == pytest.approx(x.mean() - half, abs=0.06) and high == pytest.approx(
        x.mean() + half, abs=0.06
    )
    assert bootstrap_ci(np.full(5, 0.2), config) == (0.2, 0.2)


def test_wilcoxon_matches_scipy():
    d = np.array([0.3, -0.1, 0.5, 0.2, 0.0, 0.7, -0.2, 0.4])
    assert wilcoxon_p(d, "greater") == pytest.approx(stats.wilcoxon(d[d != 0], alternative="greater").pvalue)
    assert wilcoxon_p(d, "two-sided") == pytest.approx(stats.wilcoxon(d[d != 0]).pvalue)
    assert wilcoxon_p(np.zeros(6), "greater") == 1.0


def test_mcnemar_by_hand():
    a = np.array([1] * 8 + [0] * 2 + [1] * 5 + [0] * 5, dtype=bool)
    b = np.array([0] * 8 + [1] * 2 + [1] * 5 + [0] * 5, dtype=bool)
    # 8 vs 2 discordant pairs: exact two-sided binomial p = 2 * P(X <= 2 | n=10, 1/2) = 2 * 56 / 1024
    assert mcnemar_p(a, b) == pytest.approx(2 * 56 / 1024)
    assert mcnemar_p(a, a) == 1.0


def test_bh_by_hand():
    p = np.array([0.01, 0.04, 0.03, np.nan, 0.20])
    # sorted 0.01, 0.03, 0.04, 0.20 with m = 4: 0.04, 0.06 -> min(0.06, 0.0533) = 0.0533, 0.0533, 0.20
    expected = np.array([0.04, 0.04 * 4 / 3, 0.04 * 4 / 3, np.nan, 0.20])
    np.testing.assert_allclose(bh_adjust(p), expected, equal_nan=True)


def test_kendall_w_by_hand_and_via_friedman():
    ranks = np.array([[1, 2, 3, 4], [1, 3, 2, 4], [2, 1, 3, 4]], dtype=float)
    # column sums 4, 6, 8, 12; mean 7.5; S = 12.25 + 2.25 + 0.25 + 20.25 = 35; W = 12 * 35 / (9 * 60)
    w, p = kendall_w(ranks)
    assert w == pytest.approx(12 * 35 / (9 * 60))
    friedman = stats.friedmanchisquare(*ranks.T)  # raters as blocks: chi2 = m (n - 1) W
    assert friedman.statistic == pytest.approx(3 * 3 * w)
    assert p == pytest.approx(friedman.pvalue)
    assert kendall_w(np.array([[1, 2, 3], [1, 2, 3]], dtype=float))[0] == pytest.approx(1.0)


def test_kendall_tau_b_rows_equals_scipy_with_ties():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 3, (50, 5)).astype(float)
    b = rng.integers(0, 3, (50, 5)).astype(float)
    got = kendall_tau_b_rows(a, b)
    for i in range(50):
        ref = stats.kendalltau(a[i], b[i]).statistic
        if np.isnan(ref):
            assert np.isnan(got[i])
        else:
            assert got[i] == pytest.approx(ref)


def test_nemenyi_cd_matches_the_published_table():
    # Demsar (2006): q_0.05 = 2.343 for k = 3, 2.569 for k = 4 (already divided by sqrt 2)
    assert nemenyi_cd(3, 10, 0.05) == pytest.approx(2.343 * math.sqrt(3 * 4 / 60), rel=2e-3)
    assert nemenyi_cd(4, 25, 0.05) == pytest.approx(2.569 * math.sqrt(4 * 5 / 150), rel=2e-3)


def test_partial_spearman_equals_the_closed_form_with_one_covariate():
    rng = np.random.default_rng(3)
    z = rng.normal(size=200)
    x = z + rng.normal(size=200)
    y = z + rng.normal(size=200)
    res_x, res_y = partial_spearman(x, y, z[:, None])
    got = stats.pearsonr(res_x, res_y).statistic
    r = lambda u, v: stats.spearmanr(u, v).statistic  # noqa: E731
    expected = (r(x, y) - r(x, z) * r(y, z)) / math.sqrt((1 - r(x, z) ** 2) * (1 - r(y, z) ** 2))
    assert got == pytest.approx(expected, abs=1e-9)
    assert abs(r(x, y)) > 0.3 and abs(got) < 0.15  # the shared cause explains the correlation


def test_permutation_p_agrees_with_the_t_test_p():
    rng = np.random.default_rng(5)
    x = rng.normal(size=60)
    y = 0.3 * x + rng.normal(size=60)
    config = StatsConfig(n_resamples=4000, seed=1)
    assert correlation_permutation_p(x, y, config) == pytest.approx(stats.pearsonr(x, y).pvalue, abs=0.01)


# --- planted truths -----------------------------------------------------------------------------------


def planted(seed: int, n: int = 40) -> RunData:
    """Three models, two datasets, planted: 'stable' at replicate noise and 'unstable' above it; on
    answer_disagreement the order of A and B reverses between the datasets; generation and confidence
    correlated through a latent, activation and mirroring independent."""
    rng = np.random.default_rng(seed)
    data = RunData("planted")
    examples = [f"e{i:03d}" for i in range(n)]
    models = {"A": 0.1, "B": 0.3, "C": 0.5}
    for dataset, flip in (("d1", False), ("d2", True)):
        data.dataset_names[dataset] = dataset
        for model, level in models.items():
            level = {"A": 0.3, "B": 0.1}.get(model, level) if flip else level
            latent = rng.uniform(0, 1, n)

            def put(axis, metric, values, family=None, model=model, dataset=dataset):
                data.items[(model, dataset, axis, metric, family)] = dict(
                    zip(examples, map(float, values), strict=True)
                )

            put("generation", "answer_disagreement", level + 0.1 * latent + 0.02 * rng.normal(size=n))
            put("generation", "flip_rate", np.clip(level + 0.05 * latent + 0.05 * rng.normal(size=n), 0, 1))
            put("confidence", "p_gold_sd", latent + 0.1 * rng.normal(size=n))
            put("activation", "dispersion", rng.uniform(0, 1, n))
            put("mirroring", "cue_following", rng.normal(0, 0.1, n), family="wrong_hint")
            noise = rng.uniform(0.0, 0.02, n)
            data.replicate[(model, dataset, "dispersion_raw")] = dict(
                zip(examples, map(float, noise), strict=True)
            )
            raw = noise + (0.02 if model == "C" else 0.0) + rng.normal(0, 0.01, n)
            put("activation", "dispersion_raw", raw)
            data.items[(model, dataset, "accuracy", "accuracy", None)] = {e: 1.0 for e in examples}
            data.canonical[(model, dataset)] = {
                e: (float(rng.uniform()), bool(rng.uniform() < 0.7)) for e in examples
            }
    return data


def table_rows(columns):
    names = list(columns)
    return [dict(zip(names, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def test_planted_truths_are_found():
    tables = compute_stats(planted(0), FAST)
    scores = {
        (r["model_id"], r["dataset_id"], r["metric"]): r
        for r in table_rows(tables.model_scores)
        if r["family"] is None
    }
    # C's representations move beyond replicate noise; A's and B's do not
    assert scores[("C", "d1", "dispersion_raw")]["p_adjusted"] < 0.01
    assert scores[("A", "d1", "dispersion_raw")]["p_value"] > 0.05
    assert scores[("A", "d1", "dispersion_raw")]["test"] == "wilcoxon vs replicate"
    # the planted reversal of A and B (and only it)
    reversals = {(r["model_a"], r["model_b"], r["metric"]) for r in table_rows(tables.rank_reversals)}
    assert ("A", "B", "answer_disagreement") in reversals
    assert not any({a, b} != {"A", "B"} for a, b, _ in reversals)
    # rankings: A most stable on d1, B on d2
    ranks = {
        (r["source"], r["model_id"]): r["rank"]
        for r in table_rows(tables.rankings)
        if r["metric"] == "answer_disagreement"
    }
    assert ranks[("d1", "A")] == 1 and ranks[("d2", "B")] == 1 and ranks[("d1", "C")] == 3
    tau = [
        r
        for r in table_rows(tables.ranking_agreement)
        if r["metric"] == "answer_disagreement" and r["statistic"] == "kendall_tau_b"
    ]
    assert tau[0]["value"] == pytest.approx(stats.kendalltau([0.1, 0.3, 0.5], [0.3, 0.1, 0.5]).statistic)
    # correlated axes found, independent ones not
    corr = {
        (r["model_id"], r["dataset_id"], {r["axis_a"], r["axis_b"]} == {"generation", "confidence"}): r
        for r in table_rows(tables.axis_correlations)
        if {r["axis_a"], r["axis_b"]} in ({"generation", "confidence"}, {"activation", "mirroring"})
    }
    for model in "ABC":
        for dataset in ("d1", "d2"):
            linked, independent = corr[(model, dataset, True)], corr[(model, dataset, False)]
            assert linked["spearman"] > 0.6 and linked["p_adjusted"] < 0.05
            assert linked["partial"] > 0.6  # not explained by canonical confidence / correctness
            assert abs(independent["spearman"]) < 0.5


def test_correlated_axes_detected_and_independent_ones_not():
    rng = np.random.default_rng(11)
    n = 80
    latent = rng.normal(size=n)
    x, y = latent + 0.5 * rng.normal(size=n), latent + 0.5 * rng.normal(size=n)
    u, v = rng.normal(size=n), rng.normal(size=n)
    config = StatsConfig(n_resamples=1000, seed=0)
    assert correlation_permutation_p(stats.rankdata(x), stats.rankdata(y), config) < 0.01
    assert correlation_permutation_p(stats.rankdata(u), stats.rankdata(v), config) > 0.05


def test_false_positive_rates_stay_near_the_nominal_level():
    """Over repeated seeds, the stable model's instability test and the independent axes' correlation
    reject at most alpha + a margin of the time."""
    rejections_stable, rejections_corr, n_seeds = 0, 0, 60
    for seed in range(n_seeds):
        tables = compute_stats(planted(seed, n=30), FAST)
        rows = table_rows(tables.model_scores)
        stable = [
            r
            for r in rows
            if r["model_id"] == "A" and r["metric"] == "dispersion_raw" and r["dataset_id"] == "d1"
        ]
        rejections_stable += stable[0]["p_value"] < 0.05
        corr = [
            r
            for r in table_rows(tables.axis_correlations)
            if r["model_id"] == "A"
            and r["dataset_id"] == "d1"
            and {r["axis_a"], r["axis_b"]} == {"activation", "mirroring"}
        ]
        rejections_corr += corr[0]["spearman_p"] < 0.05
    assert rejections_stable / n_seeds <= 0.05 + 0.07
    assert rejections_corr / n_seeds <= 0.05 + 0.07


def test_same_seed_same_tables():
    first = compute_stats(planted(3), FAST)
    second = compute_stats(planted(3), FAST)
    for table in first.TABLES:
        assert table_rows(getattr(first, table)) == table_rows(getattr(second, table))
