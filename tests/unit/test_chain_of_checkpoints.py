"""A training run whose checkpoints are all the same model: what changed over training must be nothing,
in at most alpha (+ simulation noise) of runs, with fixed-n tests (BH over the chain's comparisons) and with
``--until-separated`` (each paired sequence at the run's alpha split over its comparisons)."""

from __future__ import annotations

import numpy as np

from sago_fast.stats import StatsConfig
from sago_fast.stats.compute import changes_over_training
from sago_fast.stats.data import RunData
from sago_fast.units.separation import SeparationMonitor, Side
from sago_fast.units.sequential import SequentialSettings

STEPS = 6
N = 40
RUNS = 100


def identical_chain(seed: int) -> RunData:
    """6 checkpoints of one model: each example's values drawn afresh from the same distribution (a
    checkpoint's noise), accuracy, answer disagreement and a heavy-tailed option_js."""
    rng = np.random.default_rng(seed)
    data = RunData(f"chain-{seed}")
    examples = [f"e{i:03d}" for i in range(N)]
    difficulty = rng.uniform(0.2, 0.9, N)
    for step in range(STEPS):
        model = f"m{step}"
        data.positions.append((model, "run", (step + 1) * 100))
        values = {
            ("accuracy", "accuracy"): (rng.random(N) < difficulty).astype(float),
            ("generation", "answer_disagreement"): np.clip(rng.normal(0.3, 0.15, N), 0, 1),
            ("confidence", "option_js"): np.minimum(rng.lognormal(-4.0, 1.5, N), np.log(2)),
        }
        for (axis, metric), per_example in values.items():
            data.put(
                (model, "d", axis, metric, None), dict(zip(examples, map(float, per_example), strict=True))
            )
    return data


def test_fixed_n_tests_declare_a_change_between_identical_checkpoints_rarely():
    config = StatsConfig(n_resamples=200, seed=1)
    any_change = 0
    for seed in range(RUNS):
        changes = changes_over_training(identical_chain(seed), config)
        assert len(changes["significant"]) == (STEPS - 1) * 3
        any_change += any(changes["significant"])
    assert any_change / RUNS <= 0.07, any_change / RUNS


def lockstep(
    monitor: SeparationMonitor, models: dict[str, dict[str, float]], order: tuple, chunk: int
) -> None:
    """The lockstep scheduler: the unit with the fewest examples goes next, a chunk at a time, until its
    comparisons are settled (sign known, or half-width within the precision) or its examples run out."""
    seen = dict.fromkeys(models, 0)
    stopped: set[str] = set()
    while len(stopped) < len(models):
        unit = min((u for u in models if u not in stopped), key=lambda u: (seen[u], u))
        if monitor.stop_reason(unit, None) is not None or seen[unit] >= len(order):
            stopped.add(unit)
            continue
        visited = order[seen[unit] : seen[unit] + chunk]
        monitor.add_unit_chunk(unit, {"accuracy": {e: models[unit][e] for e in visited}})
        seen[unit] += chunk


def test_until_separated_declares_a_sign_between_identical_checkpoints_rarely():
    """Looking after every chunk of 50 and stopping on a sign: with each sequence at the run's full alpha
    some pair of the chain declared a sign in 15% of runs; split over the comparisons, in <= 7%."""
    order = tuple(f"e{i}" for i in range(300))
    sides = [Side(f"u{i}", f"m{i}", "d") for i in range(STEPS)]
    settings = SequentialSettings(precision=0.1, until_separated=True)
    any_sign, runs = 0, 40
    for seed in range(runs):
        rng = np.random.default_rng(seed)
        models = {
            s.unit_id: dict(zip(order, rng.binomial(1, 0.6, len(order)).astype(float), strict=True))
            for s in sides
        }
        monitor = SeparationMonitor.neighbours(settings, sides, {"d": order})
        lockstep(monitor, models, order, 50)
        any_sign += any(b.sign != 0 for b in monitor.final())
    assert any_sign / runs <= 0.07, any_sign / runs
    # split over the chain's comparisons and the one metric they follow
    assert {b.alpha for b in monitor.final()} == {settings.alpha / (STEPS - 1)}
