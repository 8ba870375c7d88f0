"""Stop when a comparison is settled (``sago run --until-separated --precision H``).

Each dataset's units are compared in pairs of neighbours in the run's model order (a training run's
consecutive checkpoints; ``A B C`` gives A-B and B-C). For each pair and each metric both units follow, a
paired anytime-valid confidence sequence (:mod:`sago_fast.stats.confidence_sequences`) runs on the per-example
difference, later minus earlier (b - a), over the examples both have visited, in the shared visiting
order, on the range ``[-(high - low), high - low]`` of the metric's bounds. A comparison is settled on a
metric once the sign of the difference is known (the sequence excludes 0) or its half-width is within H;
each sequence is built at the run's alpha split over its comparisons and the metrics each one follows
(Bonferroni, :func:`family_alpha`), so a sign declared anywhere in the run is wrong with probability at most
alpha;
a pair once every metric is; a unit stops (``separated``) once every pair it is in is settled. A unit
whose comparisons are all gone (its neighbours failed) falls back to its own precision rule.

Determinism: a pair's bounds are a function of its paired prefix only, computed afresh from the first k
examples of the visiting order that both units have visited. The lockstep scheduler
(:mod:`sago_fast.run.lockstep`) advances the unit with the fewest examples, so at a unit's turn its live
partners have visited at least as many and k is the unit's own count (a stopped partner's pair was settled
when it stopped, and stays so). Each decision is then a function of the two models' values on the first n
examples, and a resumed run reaches the same stopping points as an uninterrupted one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from sago_fast.units.sequential import (
    ACCURACY,
    SEPARATED,
    ChunkValues,
    MetricBounds,
    SequentialSettings,
    SequentialTracker,
    followed_metrics,
    metric_sequence,
    own_precision,
)

log = logging.getLogger(__name__)


def family_alpha(alpha: float, n_comparisons: int, n_metrics: int) -> float:
    """One sequence's share of ``alpha`` (Bonferroni): alpha / (the run's neighbour comparisons × the
    metrics this comparison follows). Summed over every comparison's sequences that is ``alpha``, so the
    chance of any sequence of the run excluding a true difference (a "significant" change between equal
    checkpoints among them) stays within ``alpha``; metrics nobody follows take no share. Which metrics a
    comparison follows depends on the metrics its units' first chunks have (the data's kind), never on
    their values."""
    return alpha / max(1, n_comparisons * n_metrics)


@dataclass(frozen=True)
class Side:
    """One unit of a comparison."""

    unit_id: str
    model_id: str
    dataset_id: str


@dataclass(frozen=True)
class PairBounds(MetricBounds):
    """A comparison's confidence sequence for one metric after ``n_examples`` paired examples: the mean
    difference b - a (``estimate``) over the ``n`` examples both have a value for."""

    dataset_id: str
    a: Side
    b: Side
    n_examples: int
    alpha: float = 0.05  # 1 - the sequence's coverage: the run's alpha, split over its comparisons

    @property
    def sign(self) -> int:
        """+1: b is higher, -1: a is higher (the sequence excludes 0), 0: not known."""
        return 1 if self.lower > 0 else -1 if self.upper < 0 else 0

    def settled(self, precision: float) -> bool:
        return self.sign != 0 or self.half_width <= precision


def say_committed(dataset: str, grown: Sequence[PairBounds]) -> None:
    """Log the accuracy comparisons a chunk grew, once the chunk (and they) are in the results file."""
    for bounds in grown:
        if bounds.metric == ACCURACY:
            log.info(
                "%s: %d paired examples, accuracy difference %+.3f [%.3f, %.3f]",
                dataset,
                bounds.n_examples,
                bounds.estimate,
                bounds.lower,
                bounds.upper,
            )


@dataclass
class Comparison:
    """Two neighbouring units of one dataset; ``order``: the dataset's visiting order (example ids)."""

    a: Side
    b: Side
    order: tuple[str, ...]
    bounds: list[PairBounds] = field(default_factory=list)  # at ``n_examples``
    n_examples: int = 0

    def involves(self, unit_id: str) -> bool:
        return unit_id in (self.a.unit_id, self.b.unit_id)


class SeparationMonitor:
    """The comparisons of a run's units: fed each unit's chunk values (committed before or just now), it
    says when a unit's comparisons are all settled."""

    def __init__(self, settings: SequentialSettings, comparisons: Sequence[Comparison]) -> None:
        if settings.precision is None:
            raise ValueError("comparisons are settled within a precision")
        self.settings = settings
        self.precision: float = settings.precision
        self.comparisons = list(comparisons)
        self.n_comparisons = len(self.comparisons)  # the Bonferroni count, fixed when the run starts
        self.values: dict[str, dict[str, dict[str, float]]] = {}  # unit -> metric -> example -> value
        self.first_metrics: dict[str, set[str]] = {}  # unit -> the metrics of its first chunk

    @classmethod
    def neighbours(
        cls, settings: SequentialSettings, sides: Sequence[Side], orders: Mapping[str, Sequence[str]]
    ) -> SeparationMonitor:
        """Pairs of consecutive ``sides`` (in run order) of each dataset; ``orders``: dataset id -> its
        visiting order within the budget."""
        by_dataset: dict[str, list[Side]] = {}
        for side in sides:
            by_dataset.setdefault(side.dataset_id, []).append(side)
        comparisons = [
            Comparison(a, b, tuple(orders[dataset_id]))
            for dataset_id, group in by_dataset.items()
            for a, b in pairwise(group)
        ]
        return cls(settings, comparisons)

    def add_unit_chunk(self, unit_id: str, chunk: ChunkValues) -> list[PairBounds]:
        """Record one chunk of ``unit_id``; returns the bounds of its comparisons whose paired prefix
        grew (each metric's sequence after it)."""
        if not chunk.get(ACCURACY):
            return []
        self.first_metrics.setdefault(unit_id, set(chunk))
        mine = self.values.setdefault(unit_id, {})
        for name, by_example in chunk.items():
            mine.setdefault(name, {}).update(by_example)
        grown = []
        for comparison in self.comparisons:
            if comparison.involves(unit_id) and self._update(comparison):
                grown += comparison.bounds
        return grown

    def drop(self, unit_id: str) -> None:
        """A failed unit: its comparisons are gone (its partners no longer wait for them)."""
        self.comparisons = [c for c in self.comparisons if not c.involves(unit_id)]

    def settled(self, unit_id: str) -> bool | None:
        """Whether every comparison of ``unit_id`` is settled; None when it has none (left)."""
        mine = [c for c in self.comparisons if c.involves(unit_id)]
        if not mine:
            return None
        return all(c.bounds and all(b.settled(self.precision) for b in c.bounds) for c in mine)

    def stop_reason(self, unit_id: str, tracker: SequentialTracker | None) -> str | None:
        """Why ``unit_id`` stops at its turn: ``separated``, ``precision`` (no comparison left and its own
        metrics within H) or None (go on)."""
        settled = self.settled(unit_id)
        if settled is None:
            return own_precision(unit_id, tracker) if tracker is not None else None
        return SEPARATED if settled else None

    def final(self) -> list[PairBounds]:
        return [b for c in self.comparisons for b in c.bounds]

    def _visited(self, unit_id: str) -> int:
        return len(self.values.get(unit_id, {}).get(ACCURACY, ()))

    def _update(self, comparison: Comparison) -> bool:
        """Recompute the comparison's bounds on its paired prefix when it grew."""
        k = min(self._visited(comparison.a.unit_id), self._visited(comparison.b.unit_id))
        if k == comparison.n_examples:
            return False
        a, b = self.values[comparison.a.unit_id], self.values[comparison.b.unit_id]
        metrics = followed_metrics(
            self.first_metrics[comparison.a.unit_id] & self.first_metrics[comparison.b.unit_id]
        )
        prefix = comparison.order[:k]
        alpha = family_alpha(self.settings.alpha, self.n_comparisons, len(metrics))
        comparison.bounds = [
            self._bounds(
                comparison, name, k, paired_differences(prefix, a.get(name, {}), b.get(name, {})), alpha
            )
            for name in metrics
        ]
        comparison.n_examples = k
        return True

    def _bounds(
        self, comparison: Comparison, name: str, k: int, differences: np.ndarray, alpha: float
    ) -> PairBounds:
        scale, sequence = metric_sequence(name, alpha, self.precision, len(comparison.order), paired=True)
        sequence.extend(scale.to_unit(differences))
        lower, upper = sequence.bounds()
        return PairBounds(
            name,
            len(differences),
            float(differences.mean()) if len(differences) else float("nan"),
            scale.from_unit(lower),
            scale.from_unit(upper),
            comparison.a.dataset_id,
            comparison.a,
            comparison.b,
            k,
            alpha,
        )


def paired_differences(prefix: Sequence[str], a: Mapping[str, float], b: Mapping[str, float]) -> np.ndarray:
    """b - a for the examples of ``prefix`` (in its order) that both have a value for (n,)."""
    return np.array([b[e] - a[e] for e in prefix if e in a and e in b], dtype=np.float64)
