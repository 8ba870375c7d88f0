"""The resampling kernels against NumPy/SciPy: the draws are uniform and independent, the moments and sign
sums are those of the draws, and a run of many checkpoints compares the pairs it says it does."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from sago_fast.kernels.resampling import bootstrap_means, bootstrap_moments, sign_flip_sums, stream_key


def test_draw_counts_are_multinomial_with_equal_cells():
    n, draws = 50, 4000
    counts = bootstrap_means(np.eye(n), draws, stream_key(0, 1)) * n  # (draws, n): times each row was drawn
    assert np.allclose(counts.sum(axis=1), n)  # every resample draws n rows
    assert np.allclose(counts, np.round(counts))
    # pooled over resamples the rows are drawn equally often (a fixed key: the p-value is one number)
    assert stats.chisquare(counts.sum(axis=0)).pvalue > 1e-3
    # a cell's count is Binomial(n, 1/n): its mean and variance
    assert counts.mean() == pytest.approx(1.0)
    assert counts.var() == pytest.approx(1 - 1 / n, rel=0.05)
    # resamples do not repeat one another, and keys give different streams
    assert len({row.tobytes() for row in counts}) == draws
    other = bootstrap_means(np.eye(n), draws, stream_key(0, 2)) * n
    assert not np.array_equal(counts, other)


def test_moments_are_those_of_the_drawn_rows_and_deterministic():
    x = np.random.default_rng(3).lognormal(size=301)
    key = stream_key(7, 11)
    sums, squares = bootstrap_moments(x, 500, key)
    counts = bootstrap_means(np.eye(len(x)), 500, key) * len(x)  # the same draws, as counts
    assert np.allclose(sums, counts @ x)
    assert np.allclose(squares, counts @ x**2)
    again = bootstrap_moments(x, 500, key)
    assert np.array_equal(sums, again[0]) and np.array_equal(squares, again[1])
    # the bootstrap distribution of the mean: centred on the mean, spread sd / sqrt(n)
    means = sums / len(x)
    assert means.mean() == pytest.approx(x.mean(), abs=3 * x.std() / np.sqrt(len(x)) / np.sqrt(500) * 3)
    assert means.std() == pytest.approx(x.std() / np.sqrt(len(x)), rel=0.1)


def test_sign_sums_are_fair_independent_signs():
    n, draws = 40, 5000
    sums, counts = sign_flip_sums(np.ones(n), draws, stream_key(1, 2))
    assert np.array_equal(sums, counts)
    heads = (counts + n) / 2  # Binomial(n, 1/2)
    assert np.allclose(heads, np.round(heads))
    # the number of + signs is Binomial(n, 1/2): chi-square over its central values, the tails pooled
    edges = np.arange(14, 27)  # cells (-inf, 14], 15, ..., 26, [27, inf)
    observed = np.array([(heads <= 14).sum(), *((heads == k).sum() for k in edges[1:]), (heads >= 27).sum()])
    law = stats.binom(n, 0.5)
    expected = draws * np.array([law.cdf(14), *(law.pmf(k) for k in edges[1:]), law.sf(26)])
    assert stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 1e-3
    assert heads.mean() == pytest.approx(n / 2, abs=0.1)
    assert heads.var() == pytest.approx(n / 4, rel=0.06)
    # the sign of each example is its own: s . e_i is that sign alone
    d = np.zeros(n)
    d[5] = 2.5
    first, _ = sign_flip_sums(d, draws, stream_key(1, 2))
    assert set(np.unique(first)) == {-2.5, 2.5}


def test_many_checkpoints_compare_consecutive_steps_and_the_other_models():
    from sago_fast.stats.compute import ALL_PAIRS_MAX_MODELS, compared_pairs
    from sago_fast.stats.data import RunData
    from sago_fast.stats.settings import StatsConfig

    data = RunData("r")
    steps = [f"ckpt{i:02d}" for i in range(ALL_PAIRS_MAX_MODELS + 3)]
    for i, model in enumerate([*steps, "base", "other"]):
        data.put((model, "d", "accuracy", "accuracy", None), {"e1": 1.0, "e2": 0.0})
        if model in steps:
            data.positions.append((model, "run", (i + 1) * 100))
    pairs = compared_pairs(data, StatsConfig())
    consecutive = set(itertools.pairwise(steps))
    assert consecutive <= set(pairs)
    assert {("base", "other"), ("base", steps[-1]), (steps[-1], "other")} <= set(pairs)
    assert len(pairs) == len(consecutive) + 3
    assert all(a < b for a, b in pairs)
    every = compared_pairs(data, StatsConfig(all_pairs=True))
    assert len(every) == len(data.models) * (len(data.models) - 1) // 2


def test_large_samples_take_scipys_correlation_p():
    from sago_fast.stats.methods import PERMUTATION_MAX_N, correlation_permutation_p
    from sago_fast.stats.settings import StatsConfig

    rng = np.random.default_rng(0)
    x = rng.normal(size=PERMUTATION_MAX_N + 1)
    y = 0.05 * x + rng.normal(size=len(x))
    assert correlation_permutation_p(x, y, StatsConfig()) == pytest.approx(stats.pearsonr(x, y).pvalue)
    small_x, small_y = x[:200], y[:200]
    permuted = correlation_permutation_p(small_x, small_y, StatsConfig(n_resamples=4000))
    assert permuted == pytest.approx(stats.pearsonr(small_x, small_y).pvalue, abs=0.03)
