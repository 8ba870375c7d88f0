"""The paired comparison (``model_comparisons``, ``checkpoint_changes``) on the kinds of differences sago
produces, simulated with fixed seeds: its false-positive rate, its intervals, its power on steps, and the
agreement of every row's interval with its p-value."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from sago_fast.stats import StatsConfig
from sago_fast.stats.methods import paired_mean_difference

pytestmark = pytest.mark.xdist_group("paired_level")  # module fixtures: built once, in one process

CONFIG = StatsConfig(n_resamples=500, seed=0)
SIMULATIONS = 400
LEVEL = 0.05


def null_differences(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Differences of mean 0 (a null for the test of the mean)."""
    if kind == "normal":
        return rng.normal(0.0, 1.0, n)
    if kind == "skewed":  # mean 0, long right tail
        return rng.exponential(1.0, n) - 1.0
    if kind == "t3":
        return rng.standard_t(3, n)
    if kind == "sparse":  # 90% ties, the rest {±0.5, ±1}
        values = rng.choice([-1.0, -0.5, 0.5, 1.0], n)
        return np.where(rng.random(n) < 0.9, 0.0, values)
    if kind == "constant":
        return np.zeros(n)
    raise ValueError(kind)


@pytest.fixture(scope="module")
def null_runs():
    """(kind, n) -> list of (differences, result) over SIMULATIONS seeded data sets."""
    rng = np.random.default_rng(2026)
    out = {}
    for kind in ("normal", "skewed", "t3", "sparse", "constant"):
        for n in (20, 60, 200):
            runs = []
            for i in range(SIMULATIONS if kind != "constant" else 20):
                d = null_differences(kind, n, rng)
                runs.append((d, paired_mean_difference(d, np.zeros(n), CONFIG, stream=i)))
            out[(kind, n)] = runs
    return out


def test_the_false_positive_rate_holds_in_every_null_cell(null_runs):
    rates = {cell: np.mean([r.p_value < LEVEL for _, r in runs]) for cell, runs in null_runs.items()}
    assert all(rate <= 0.07 for rate in rates.values()), rates
    assert max(rates.values()) > 0.02  # the test does reject sometimes: the check can fail


def test_no_bound_lies_beyond_the_data_and_every_interval_agrees_with_its_p(null_runs):
    checked = 0
    for runs in null_runs.values():
        for d, result in runs:
            reach = float(np.max(np.abs(d)))
            assert abs(result.low) <= reach + 1e-12 and abs(result.high) <= reach + 1e-12
            assert (result.low > 0 or result.high < 0) == (result.p_value < LEVEL), result
            checked += 1
    assert checked >= 1000


@pytest.mark.parametrize("n", [20, 60, 200])
def test_a_step_is_found_about_as_often_as_a_t_test_finds_it(n):
    """a = b + step on 95% of the examples (b in {0, 0.4}): the step sago sees when one checkpoint is
    better on most items. Power at least 0.9 of the paired t-test's; small steps so that power < 1."""
    rng = np.random.default_rng(n)
    step = {20: 0.12, 60: 0.07, 200: 0.04}[n]
    ours = theirs = 0
    for i in range(150):
        b = rng.choice([0.0, 0.4], n)
        a = b + np.where(rng.random(n) < 0.95, step, 0.0) + rng.normal(0.0, 0.2, n)
        ours += paired_mean_difference(a, b, CONFIG, stream=i).p_value < LEVEL
        theirs += stats.ttest_rel(a, b).pvalue < LEVEL
    assert 0 < theirs < 150 and ours >= 0.9 * theirs, (ours, theirs)
