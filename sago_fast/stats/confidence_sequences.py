"""Anytime-valid confidence sequences for the mean of bounded values (betting, hedged capital).

Waudby-Smith & Ramdas, "Estimating means of bounded random variables by betting" (JRSS-B 2024): the
hedged capital process with predictable plug-in bets (numpy only: ``confseq`` needs a C++ build with
Boost, ``expectation`` Python >= 3.12). For values x_1, x_2, ... in [0, 1] with mean m*:

    mu_t     = (1/2 + sum_{i<=t} x_i) / (t + 1)
    var_t    = (1/4 + sum_{i<=t} (x_i - mu_i)^2) / (t + 1)
    lambda_t = sqrt(2 log(2 / alpha) / (var_{t-1} n_t))                    (predictable: uses t - 1)
    K+_t(m)  = prod_{i<=t} (1 + min(lambda_i, c / m) (x_i - m))
    K-_t(m)  = prod_{i<=t} (1 - min(lambda_i, c / (1 - m)) (x_i - m))
    CS_t     = {m : (K+_s(m) + K-_s(m)) / 2 < 1 / alpha for every s <= t}     (c = 1/2)

K+, K- and so their average (the hedge, theta = 1/2) are nonnegative martingales with K_0 = 1 at m = m*,
so by Ville's inequality P(exists t: m* not in CS_t) <= alpha, *whatever* predictable n_t is: coverage
holds at any stopping time, however it is chosen from the data (checking after every chunk and stopping
once the sequence is narrow enough included).

n_t is the sample size the bets are tuned for (the paper's Section 5): ``t log(t + 1)`` when nothing is
known (:data:`UNTUNED`), else a target: the sample size at which a fixed-n interval would have the wanted
half-width h, ``2 log(2 / alpha) var_{t-1} / h^2``, within [1, horizon] (the budget or the data's size).
Tuned bets make the sequence narrowest near where the run is expected to stop. The price of validity is
width: at a fixed n a sequence is wider than a CI valid at that n only (about 1.4x the normal interval's
half-width at the tuned n for 0/1 values; see ``benchmarks/bench_sequential.py``).

The set is computed on a grid of candidate means (``GRID`` points in (0, 1)) and widened by one grid step
on each side, so the reported bounds contain the exact set.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

GRID = 1000  # candidate means in (0, 1): bounds are exact to 1 / GRID of the range
BET_CAP = 0.5  # c: a bet never risks more than half the capital
UNTUNED = None
# model_comparisons.test (and checkpoint_changes.test) of pairs compared with ``sago run --until-separated``:
# the CI is the paired sequence they stopped on, no p-value; significant when it excludes 0
SEPARATION_TEST = "anytime-valid paired confidence sequence (--until-separated)"


@dataclass(frozen=True)
class SequenceBounds:
    """A confidence sequence after n values, in the values' own scale."""

    n: int
    estimate: float  # the sample mean
    lower: float
    upper: float

    @property
    def half_width(self) -> float:
        return (self.upper - self.lower) / 2


@dataclass(frozen=True)
class Tuning:
    """What the bets are tuned for: ``half_width`` (on [0, 1]) wanted, within ``horizon`` values at most;
    both None: untuned (n_t = t log(t + 1))."""

    half_width: float | None = None
    horizon: int | None = None

    def sample_sizes(self, t: np.ndarray, var_before: np.ndarray, alpha: float) -> np.ndarray:
        """n_t for each t (1-based) given var_{t-1}."""
        if self.half_width is None:
            return t * np.log(t + 1) if self.horizon is None else np.full_like(t, float(self.horizon))
        wanted = 2 * math.log(2 / alpha) * var_before / self.half_width**2
        return np.clip(wanted, 1.0, float(self.horizon) if self.horizon else np.inf)


@dataclass
class BettingSequence:
    """The running state of one confidence sequence on [0, 1]: feed values in order with :meth:`extend`.

    Deterministic in the values and their order, so a resumed run that feeds the same values again
    reaches the same bounds."""

    alpha: float = 0.05
    tuning: Tuning = Tuning()
    grid: int = GRID
    n: int = 0
    total: float = 0.0  # sum x_i
    squares: float = 0.0  # sum (x_i - mu_i)^2
    log_up: np.ndarray = field(default_factory=lambda: np.zeros(0))  # log K+ (G,)
    log_down: np.ndarray = field(default_factory=lambda: np.zeros(0))  # log K- (G,)
    rejected: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # (G,) out for good

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), not {self.alpha}")
        if len(self.log_up) == 0:
            self.log_up = np.zeros(self.grid)
            self.log_down = np.zeros(self.grid)
            self.rejected = np.zeros(self.grid, dtype=bool)

    @property
    def means(self) -> np.ndarray:
        """The candidate means (G,)."""
        return (np.arange(self.grid, dtype=np.float64) + 0.5) / self.grid

    def extend(self, values: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Feed ``values`` (in [0, 1], in order); returns the running (lower, upper) after each of them."""
        x = np.asarray(values, dtype=np.float64)
        if x.ndim != 1:
            raise ValueError("values must be one-dimensional")
        if len(x) and ((x < 0).any() or (x > 1).any() or not np.isfinite(x).all()):
            raise ValueError("confidence sequences need finite values in [0, 1]")
        t = self.n + np.arange(1, len(x) + 1, dtype=np.float64)  # (k,) the values' times
        mu = (0.5 + self.total + np.cumsum(x)) / (t + 1)
        squares = self.squares + np.cumsum((x - mu) ** 2)
        var = (0.25 + squares) / (t + 1)
        var_before = np.concatenate([[(0.25 + self.squares) / (self.n + 1)], var[:-1]])
        bets = np.sqrt(
            2 * math.log(2 / self.alpha) / (var_before * self.tuning.sample_sizes(t, var_before, self.alpha))
        )
        m = self.means
        step = x[:, None] - m[None, :]  # (k, G)
        up = self.log_up + np.log1p(np.minimum(bets[:, None], BET_CAP / m) * step).cumsum(0)
        down = self.log_down + np.log1p(-np.minimum(bets[:, None], BET_CAP / (1 - m)) * step).cumsum(0)
        hedged = np.logaddexp(up, down) - math.log(2)  # log((K+ + K-) / 2)
        out = self.rejected | np.logical_or.accumulate(hedged >= math.log(1 / self.alpha), axis=0)  # (k, G)
        if len(x):
            self.n += len(x)
            self.total += float(x.sum())
            self.squares = float(squares[-1])
            self.log_up, self.log_down, self.rejected = up[-1], down[-1], out[-1]
        return self._bounds(out)

    def _bounds(self, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        inside = ~out  # (k, G)
        any_in = inside.any(1)
        first = inside.argmax(1)
        last = self.grid - 1 - inside[:, ::-1].argmax(1)
        m, step = self.means, 1.0 / self.grid
        lower = np.where(any_in, np.clip(m[first] - step, 0.0, 1.0), np.nan)
        upper = np.where(any_in, np.clip(m[last] + step, 0.0, 1.0), np.nan)
        return lower, upper

    def bounds(self) -> tuple[float, float]:
        """(lower, upper) now; (0, 1) before any value, NaN when every mean was rejected (an event of
        probability < alpha)."""
        if self.n == 0:
            return 0.0, 1.0
        lower, upper = self._bounds(self.rejected[None, :])
        return float(lower[0]), float(upper[0])


def betting_path(
    x: np.ndarray, alpha: float = 0.05, tuning: Tuning = Tuning(), grid: int = GRID
) -> tuple[np.ndarray, np.ndarray]:
    """Running (lower, upper) of the confidence sequence after each of x_1..x_n (values in [0, 1])."""
    return BettingSequence(alpha, tuning, grid).extend(x)


@dataclass(frozen=True)
class Scale:
    """A metric's range [low, high] (the catalogue's bounds), mapped to [0, 1] and back."""

    low: float
    high: float

    def to_unit(self, values: Sequence[float] | np.ndarray) -> np.ndarray:
        x = np.asarray(values, dtype=np.float64)
        span = self.high - self.low
        if (x < self.low - 1e-9 * span).any() or (x > self.high + 1e-9 * span).any():
            raise ValueError(f"values outside their bounds [{self.low}, {self.high}]")
        return np.clip((x - self.low) / span, 0.0, 1.0)  # clips only float noise at the edges

    def from_unit(self, value: float) -> float:
        return self.low + value * (self.high - self.low)

    def width_to_unit(self, width: float) -> float:
        return width / (self.high - self.low)


def confidence_sequence(
    values: Sequence[float] | np.ndarray,
    bounds: tuple[float, float],
    alpha: float = 0.05,
    tuning: Tuning = Tuning(),
) -> SequenceBounds:
    """The confidence sequence for the mean of ``values`` (in observation order) after all of them;
    ``bounds``: the range every value lies in. ``tuning`` on the [0, 1] scale."""
    scale = Scale(*bounds)
    state = BettingSequence(alpha, tuning)
    state.extend(scale.to_unit(values))
    lower, upper = state.bounds()
    return SequenceBounds(len(values), float(np.mean(values)), scale.from_unit(lower), scale.from_unit(upper))
