"""Comparisons settled sequentially (``sago run --until-separated``): the paired sequences of neighbouring
models, when they settle, that their decisions do not depend on how the models' chunks interleave, and
their coverage and sign errors at the stopping time, by simulation (chunks of 50, n up to 2,000)."""

from __future__ import annotations

import numpy as np
import pytest

from sago_fast.errors import InputError
from sago_fast.stats.confidence_sequences import BettingSequence, Scale, Tuning
from sago_fast.units.separation import SeparationMonitor, Side, paired_differences
from sago_fast.units.sequential import SequentialSettings, SequentialTracker

N, CHUNK = 400, 50
ORDER = tuple(f"e{i}" for i in range(N))
SIDES = [Side(f"u{m}", f"m{m}", "d") for m in "ABC"]


def accuracy(p: float, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    return dict(zip(ORDER, rng.binomial(1, p, N).astype(float), strict=True))


def chunks(values: dict[str, float], start: int, stop: int) -> dict[str, dict[str, float]]:
    return {"accuracy": {e: values[e] for e in ORDER[start:stop]}}


def monitor(precision: float = 0.1, n_models: int = 3) -> SeparationMonitor:
    settings = SequentialSettings(precision=precision, until_separated=True)
    return SeparationMonitor.neighbours(settings, SIDES[:n_models], {"d": ORDER})


def run_lockstep(mon: SeparationMonitor, models: dict[str, dict[str, float]]) -> dict[str, int]:
    """Advance the unit with the fewest examples (as the lockstep scheduler does); returns each unit's
    stopping count."""
    seen = dict.fromkeys(models, 0)
    stopped: dict[str, int] = {}
    while len(stopped) < len(models):
        unit = min((u for u in models if u not in stopped), key=lambda u: (seen[u], u))
        if mon.stop_reason(unit, None) is not None or seen[unit] >= N:
            stopped[unit] = seen[unit]
            continue
        mon.add_unit_chunk(unit, chunks(models[unit], seen[unit], seen[unit] + CHUNK))
        seen[unit] += CHUNK
    return stopped


def test_a_clear_difference_settles_on_its_sign_before_the_end():
    mon = monitor(precision=0.01, n_models=2)  # the width alone would not settle it within 400
    stops = run_lockstep(mon, {"uA": accuracy(0.2, 1), "uB": accuracy(0.8, 2)})
    assert stops["uA"] == stops["uB"] < N
    (final,) = mon.final()
    assert final.sign == 1 and final.lower > 0 and final.settled(0.01)
    assert final.n_examples == final.n == stops["uA"]
    a, b = accuracy(0.2, 1), accuracy(0.8, 2)
    expected = np.mean([b[e] - a[e] for e in ORDER[: stops["uA"]]])
    assert final.estimate == pytest.approx(expected)


def test_equal_models_settle_on_the_width_and_the_middle_waits_for_both_neighbours():
    mon = monitor(precision=0.2)
    same = accuracy(0.5, 3)
    models = {"uA": same, "uB": accuracy(0.5, 4), "uC": accuracy(0.95, 5)}
    stops = run_lockstep(mon, models)
    ab, bc = sorted(mon.final(), key=lambda b: b.a.unit_id)
    assert ab.sign == 0 and ab.half_width <= 0.2  # equal: settled by the width
    assert bc.sign == 1  # C is clearly better than B
    assert stops["uB"] == max(stops.values())  # B stops only once both of its comparisons are settled
    assert min(stops["uA"], stops["uC"]) <= stops["uB"]


def test_the_bounds_depend_on_the_paired_prefix_only_not_on_the_interleaving():
    a, b = accuracy(0.4, 6), accuracy(0.6, 7)
    first, second = monitor(), monitor()
    for start in range(0, 200, CHUNK):  # A then B, chunk by chunk
        first.add_unit_chunk("uA", chunks(a, start, start + CHUNK))
        first.add_unit_chunk("uB", chunks(b, start, start + CHUNK))
    second.add_unit_chunk("uB", chunks(b, 0, 200))  # B all at once, then A in uneven pieces
    for start, stop in ((0, 30), (30, 170), (170, 200)):
        second.add_unit_chunk("uA", chunks(a, start, stop))
    assert first.final() == second.final()
    (bounds,) = first.final()
    # the run's alpha split over its comparisons and the metrics they follow (here accuracy alone)
    assert bounds.alpha == pytest.approx(0.05 / len(first.comparisons))
    scale = Scale(-1.0, 1.0)
    direct = BettingSequence(bounds.alpha, tuning=Tuning(scale.width_to_unit(0.1), N))
    direct.extend(scale.to_unit(paired_differences(ORDER[:200], a, b)))
    assert (bounds.lower, bounds.upper) == pytest.approx(tuple(map(scale.from_unit, direct.bounds())))


def test_alpha_is_split_over_the_metrics_a_comparison_follows_only():
    a, b = accuracy(0.5, 1), accuracy(0.5, 2)
    alphas = {}
    for followed in (("accuracy",), ("accuracy", "flip_rate")):
        mon = monitor(n_models=2)
        for unit, values in (("uA", a), ("uB", b)):
            mon.add_unit_chunk(unit, {name: chunks(values, 0, 100)["accuracy"] for name in followed})
        alphas[len(followed)] = {bound.metric: bound.alpha for bound in mon.final()}
    assert alphas[1] == {"accuracy": pytest.approx(0.05)}  # one comparison, one metric: all of alpha
    assert alphas[2] == {"accuracy": pytest.approx(0.025), "flip_rate": pytest.approx(0.025)}


def test_examples_without_a_value_in_either_model_are_left_out_of_a_metric():
    a = {"e0": 0.2, "e1": 0.5, "e3": 0.1}
    b = {"e0": 0.4, "e2": 0.9, "e3": 0.4}
    assert paired_differences(ORDER[:4], a, b).tolist() == pytest.approx([0.2, 0.3])


def test_a_failed_neighbour_leaves_the_unit_to_its_own_precision():
    mon = monitor()
    mon.drop("uA")
    assert mon.settled("uA") is None
    assert mon.settled("uB") is False  # B-C is still open
    mon.drop("uC")
    tracker = SequentialTracker(SequentialSettings(precision=0.5), horizon=N)
    assert mon.stop_reason("uB", tracker) is None
    tracker.add_chunk(chunks(accuracy(0.5, 8), 0, 300))
    assert mon.stop_reason("uB", tracker) == "precision"


def test_until_separated_needs_a_precision():
    with pytest.raises(InputError, match="--until-separated needs --precision"):
        SequentialSettings(until_separated=True)


DIFFERENCES = {  # (p_a, p_b, correlation of the pair's 0/1 outcomes): the true difference is p_b - p_a
    "equal": (0.5, 0.5, 0.6),
    "small": (0.5, 0.55, 0.6),
    "clear": (0.3, 0.6, 0.3),
}


def paired_outcomes(p_a: float, p_b: float, rho: float, rng: np.random.Generator, n: int) -> np.ndarray:
    """b - a for n examples whose two 0/1 outcomes share a latent difficulty (correlated pairs)."""
    from scipy import stats

    latent = rng.standard_normal(n)
    noise = rng.standard_normal((2, n))
    z = np.sqrt(rho) * latent + np.sqrt(1 - rho) * noise
    a = z[0] < stats.norm.ppf(p_a)
    b = z[1] < stats.norm.ppf(p_b)
    return b.astype(float) - a.astype(float)


@pytest.mark.parametrize("case", list(DIFFERENCES))
def test_at_the_separation_stopping_time_coverage_holds_and_a_wrong_sign_is_rare(case):
    """As two lockstep units run: a chunk, a look, stop once the sign is known or the half-width is within
    H. The true difference lies in the final sequence in >= 95% of runs, and a sign is declared wrongly
    (or at all when there is no difference) in <= 5%."""
    p_a, p_b, rho = DIFFERENCES[case]
    truth = p_b - p_a
    rng = np.random.default_rng(21)
    precision, horizon, reps = 0.05, 2000, 400
    scale = Scale(-1.0, 1.0)
    covered = wrong_sign = 0
    for _ in range(reps):
        d = paired_outcomes(p_a, p_b, rho, rng, horizon)
        sequence = BettingSequence(tuning=Tuning(scale.width_to_unit(precision), horizon), grid=400)
        for start in range(0, horizon, CHUNK):
            sequence.extend(scale.to_unit(d[start : start + CHUNK]))
            lower, upper = map(scale.from_unit, sequence.bounds())
            if lower > 0 or upper < 0 or (upper - lower) / 2 <= precision:
                break
        covered += lower <= truth <= upper
        declared = 1 if lower > 0 else -1 if upper < 0 else 0
        wrong_sign += declared != 0 and declared != np.sign(truth)
    print(f"{case}: coverage {covered / reps:.3f}, wrong or spurious sign {wrong_sign / reps:.3f}")
    assert covered / reps >= 0.95
    assert wrong_sign / reps <= 0.05
