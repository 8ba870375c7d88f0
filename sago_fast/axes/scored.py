"""What the axes read (one example's variants) and what they write (item scores)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class ExampleOutputs:
    """One example's variants, canonical first. Arrays are indexed by variant (V) then option (K).

    answer: (V,) chosen option (original index); correct: (V,) bool; option_probs: (V, K) content-aligned;
    families: (V,) family names ("canonical" first); meaning_preserving: (V,) bool; option_order: (V, K)
    displayed order (option_order[v, j] = original index shown at position j); hint_index: (V,) original
    index named by a wrong hint, -1 when none; gold: gold option index; inclusion: (V,) the probability
    that the design rendered each variant's cell (None: the full design, every probability 1).

    Under a sampled design the variants of a score over several families are weighted by the inverse of
    their (pair's) inclusion probability (:meth:`variant_weights`, :meth:`pair_weights`), so an example's
    score is unbiased for the one the full design gives it; under the full design every weight is 1.
    """

    example_id: str
    gold: int
    answer: np.ndarray
    correct: np.ndarray
    option_probs: np.ndarray
    families: tuple[str, ...]
    meaning_preserving: np.ndarray
    option_order: np.ndarray
    hint_index: np.ndarray
    inclusion: np.ndarray | None = None

    @property
    def n_options(self) -> int:
        return int(self.option_probs.shape[1])

    def restricted_to(self, rows: Sequence[int], inclusion: np.ndarray) -> ExampleOutputs:
        """The outputs of variants ``rows`` alone (canonical first), with their cells' ``inclusion``
        probabilities: what a sampled design that rendered only those variants would have."""
        return ExampleOutputs(
            self.example_id,
            self.gold,
            self.answer[rows],
            self.correct[rows],
            self.option_probs[rows],
            tuple(self.families[i] for i in rows),
            self.meaning_preserving[rows],
            self.option_order[rows],
            self.hint_index[rows],
            np.asarray(inclusion, dtype=np.float64),
        )

    def variant_weights(self, mask: np.ndarray) -> np.ndarray | None:
        """(mask.sum(),) 1 / inclusion of the masked variants, or None when all are 1 (plain means)."""
        if self.inclusion is None or (self.inclusion[mask] >= 1.0).all():
            return None
        return 1.0 / self.inclusion[mask]

    def pair_weights(self, mask: np.ndarray) -> np.ndarray | None:
        """(P,) 1 / inclusion of each pair of the masked variants (upper-triangle order), or None when all
        are 1 (plain means)."""
        if self.inclusion is None or (self.inclusion[mask] >= 1.0).all():
            return None
        return 1.0 / pair_inclusion(np.asarray(self.families)[mask], self.inclusion[mask])

    def family_mask(self, family: str | None) -> np.ndarray:
        """Canonical + the family's variants (family None: every meaning-preserving variant)."""
        return family_members(self.families, self.meaning_preserving, family)


def weighted_mean(values: np.ndarray, weights: np.ndarray | None) -> float:
    """The mean of ``values``, weighted by ``weights`` (None: the plain mean, as the full design has it)."""
    if weights is None:
        return float(np.mean(values))
    return float(np.average(values, weights=weights))


def pair_inclusion(families: Sequence[str], inclusion: np.ndarray) -> np.ndarray:
    """(V,) families and inclusion probabilities of one example's rendered variants -> (V*(V-1)/2,) the
    probability that each pair of them (upper-triangle order, as ``scipy.spatial.distance.pdist``) is
    rendered: 1 for canonical with itself, the family's own probability for two variants of one family or
    one with the canonical (or an undrawn family), and for two different drawn families
    pi_f (m - 1) / (K - 1), with m the example's drawn families and K = m / pi_f its applicable ones."""
    names = np.asarray(families)
    p = np.asarray(inclusion, dtype=np.float64)
    i, j = np.triu_indices(len(names), 1)
    joint = np.minimum(p[i], p[j])
    drawn = p < 1.0
    cross = drawn[i] & drawn[j] & (names[i] != names[j])
    if cross.any():
        m = len(set(names[drawn]))
        k = m / float(p[drawn][0])
        joint = np.where(cross, p[i] * (m - 1) / (k - 1), joint)
    return joint


def family_members(families: Sequence[str], preserving: np.ndarray, family: str | None) -> np.ndarray:
    """(V,) bool: the variants a score of ``family`` is computed over: canonical + the family's variants,
    or (family None) every meaning-preserving variant. families: (V,) names; preserving: (V,) bool."""
    if family is None:
        return np.asarray(preserving).astype(bool)
    names = np.asarray(families)
    return (names == "canonical") | (names == family)


@dataclass(frozen=True)
class ItemScore:
    example_id: str
    axis: str
    metric: str
    family: str | None  # None = all meaning-preserving variants
    value: float


@dataclass(frozen=True)
class DatasetScore:
    """One ``dataset_scores`` row of a unit: a figure over all its examples (layer and pooling for
    layer-wise figures, else None)."""

    axis: str
    metric: str
    family: str | None
    layer: int | None
    pooling: str | None
    value: float


@dataclass(frozen=True)
class LayerScores:
    """Column arrays for ``layer_scores`` rows (one per example × layer × metric × family) of one pooling.

    example_id: (rows,) str; layer: (rows,) int; metric, family: per row; value: (rows,) float64."""

    example_id: list[str]
    layer: np.ndarray
    pooling: str
    metric: list[str]
    family: list[str | None]
    value: np.ndarray

    @classmethod
    def grid(
        cls, example_ids: list[str], pooling: str, metric: str, family: str | None, values: np.ndarray
    ) -> LayerScores:
        """Rows of one (metric, family) from ``values`` (n_layers + 1, E), layer-major."""
        n_layers, n_examples = values.shape
        return cls(
            example_id=list(example_ids) * n_layers,
            layer=np.repeat(np.arange(n_layers), n_examples),
            pooling=pooling,
            metric=[metric] * values.size,
            family=[family] * values.size,
            value=values.reshape(-1).astype(np.float64),
        )

    def __len__(self) -> int:
        return len(self.metric)

    def select(self, rows: np.ndarray) -> LayerScores:
        """The rows where ``rows`` (bool, (rows,)) is true."""
        picked = np.flatnonzero(rows)
        return LayerScores(
            example_id=[self.example_id[i] for i in picked],
            layer=self.layer[picked],
            pooling=self.pooling,
            metric=[self.metric[i] for i in picked],
            family=[self.family[i] for i in picked],
            value=self.value[picked],
        )


@dataclass
class ScoredRows:
    """What scorers return for a chunk or a finished unit, before the unit's identity is added."""

    items: list[ItemScore] = field(default_factory=list)
    layers: list[LayerScores] = field(default_factory=list)
    datasets: list[DatasetScore] = field(default_factory=list)
    estimators: list[Estimator] = field(default_factory=list)

    def extend(self, other: ScoredRows) -> None:
        self.items += other.items
        self.layers += other.layers
        self.datasets += other.datasets
        self.estimators += other.estimators


@dataclass(frozen=True)
class Estimator:
    """How a unit-level figure was estimated: ``exact`` over every example, or ``sample`` over a seeded
    uniform sample of ``sample_size`` of the ``population`` examples."""

    metric: str
    estimator: str
    sample_size: int
    population: int
    seed: int
