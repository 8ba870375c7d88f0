"""Scorers above the example: layer scorers and dataset scorers, registered like item scorers.

A unit (one model on one dataset) is answered in chunks of examples (:mod:`sago_fast.units.chunk`). Each
scorer states its level and what it needs:

- **item** (:mod:`sago_fast.axes.items`): one example's variants -> ``item_scores`` rows.
- **layer**: one chunk's pooled hidden states, one :class:`ActivationBlock` per variant layout and pooling
  -> ``layer_scores`` rows of those examples (their layer means also go to ``item_scores`` for the
  metrics the catalogue lists in both tables).
- **dataset**: a *partial* from each chunk (a flat ``{name: array}`` of bounded size, committed with the
  chunk, so a resumed unit has them all) and a *finish* that combines the partials of every chunk into
  rows of any table, once the unit's last chunk is in.

Every metric a scorer writes is declared on its decorator (``metrics=``: catalogue entries under the
scorer's axis); the hub checks that it writes no other.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from sago_fast.axes.catalogue import MetricSpec, declare
from sago_fast.axes.scored import ExampleOutputs, ScoredRows, family_members, pair_inclusion
from sago_fast.registry import Registry
from sago_fast.types import Variant

Partial = dict[str, np.ndarray]  # what one dataset scorer keeps of one chunk
MIN_LAYOUT_EXAMPLES = 3  # activation metrics need other examples to compare with


DRAWN = "drawn"  # a layout column holding each example's own drawn family (a sampled design)


def variant_layout(variants: Sequence[Variant]) -> tuple[str, ...]:
    """One example's variant layout (canonical first): each variant's family, or ``drawn`` where a sampled
    design drew it (inclusion below 1), so that examples with different drawn families share a layout."""
    return tuple(v.family if v.inclusion >= 1.0 else DRAWN for v in variants)


def layout_key(layout: Sequence[str]) -> str:
    """A variant layout (families, canonical first) as one partial-key part."""
    return "|".join(layout)


@dataclass(frozen=True)
class UnitContext:
    """What scorers know about the whole unit before it starts.

    n_examples: examples in the unit; seed: the run's seed; scored_layouts: the variant layouts with at
    least MIN_LAYOUT_EXAMPLES examples in the unit (activation metrics are computed for those);
    sample: the example ids whose activations are kept for neighbourhood metrics (None: every example,
    the exact estimator)."""

    n_examples: int
    seed: int
    scored_layouts: frozenset[tuple[str, ...]]
    sample: frozenset[str] | None = None


@dataclass(frozen=True)
class ActivationBlock:
    """The pooled hidden states of a chunk's examples that share one variant layout.

    layout: (V,) families, canonical first (:func:`variant_layout`: ``drawn`` for a sampled design's drawn
    family, which differs by example); preserving: (V,) bool meaning-preserving flags;
    families: the families scored (None = every meaning-preserving variant, then each family);
    example_ids: (E,); pooling: ``last`` or ``mean``; hidden: (n_layers + 1, E, V, d) float32;
    replicate: (n_layers + 1, E, d), the canonical variants re-run alone (the replicate pass);
    family_grid: (E, V) each example's families where the layout has ``drawn`` columns (None: the layout);
    inclusion: (E, V) the cells' inclusion probabilities (None: all 1, the full design)."""

    layout: tuple[str, ...]
    preserving: np.ndarray
    families: tuple[str | None, ...]
    example_ids: tuple[str, ...]
    pooling: str
    hidden: np.ndarray
    replicate: np.ndarray
    family_grid: np.ndarray | None = None
    inclusion: np.ndarray | None = None

    @cached_property
    def pair_distances(self) -> np.ndarray:
        """(n_layers + 1, E, V*(V-1)/2) cosine distances between each example's variants (pdist order)."""
        from sago_fast.kernels import pairwise_layers

        return pairwise_layers(self.hidden, "cosine", check=False)

    def members(self, family: str | None) -> np.ndarray:
        """(E, V) bool: each example's canonical + the family's variants (None: every meaning-preserving
        variant)."""
        if self.family_grid is None:
            row = family_members(self.layout, self.preserving, family)
            return np.broadcast_to(row, (len(self.example_ids), len(row)))
        return np.stack([family_members(row, self.preserving, family) for row in self.family_grid])

    def pair_weights(self, family: str | None) -> np.ndarray:
        """(E, P) weight of each pair of each example's variants (upper-triangle order) in a mean over the
        family's pairs: 0 outside them, 1 / the pair's inclusion probability inside (1 under the full
        design)."""
        members = self.members(family)
        i, j = np.triu_indices(members.shape[1], 1)
        inside = (members[:, i] & members[:, j]).astype(np.float64)
        if self.inclusion is None:
            return inside
        names = self.family_grid if self.family_grid is not None else np.array([self.layout] * len(inside))
        joint = np.stack([pair_inclusion(n, p) for n, p in zip(names, self.inclusion, strict=True)])
        return inside / joint


@dataclass(frozen=True)
class ChunkView:
    """Everything a layer or dataset scorer may read about one chunk of a unit.

    examples: one :class:`ExampleOutputs` per example of the chunk; confidence, correct, family,
    meaning_preserving: (Nv,) per variant of the chunk (confidence: top option probability, or
    P(generated sequence)); blocks: the chunk's activations by layout and pooling."""

    context: UnitContext
    examples: Sequence[ExampleOutputs]
    confidence: np.ndarray
    correct: np.ndarray
    family: np.ndarray
    meaning_preserving: np.ndarray
    blocks: Sequence[ActivationBlock]

    def scored_blocks(self) -> list[ActivationBlock]:
        return [b for b in self.blocks if b.layout in self.context.scored_layouts]


@dataclass(frozen=True)
class LayerScorer:
    """Per-example, per-layer metrics of one axis from one activation block."""

    axis: str
    score: Callable[[ActivationBlock, UnitContext], list]


class DatasetScorer(Protocol):
    """A unit-level figure accumulated over chunks: ``partial`` per chunk, ``finish`` once at the end
    (given every chunk's partial, in chunk order)."""

    axis: str

    def partial(self, chunk: ChunkView) -> Partial: ...

    def finish(self, partials: Sequence[Mapping[str, np.ndarray]], context: UnitContext) -> ScoredRows: ...


LAYER_SCORERS: Registry[LayerScorer] = Registry("layer scorer")
DATASET_SCORERS: Registry[DatasetScorer] = Registry("dataset scorer")


def layer_scorer(name: str, axis: str, metrics: Sequence[MetricSpec] = ()) -> Callable:
    """Decorator registering ``fn(block, context) -> list[LayerScores]`` as the layer scorer ``name``, and
    declaring the metrics it writes (``metrics``, filed under ``axis``)."""

    def add(fn: Callable) -> Callable:
        LAYER_SCORERS.add(name, LayerScorer(axis, fn))
        declare(axis, metrics)
        return fn

    return add


def dataset_scorer(name: str, metrics: Sequence[MetricSpec] = ()) -> Callable:
    """Class decorator registering an instance of a :class:`DatasetScorer` class as ``name``, and
    declaring the metrics it writes (``metrics``, filed under the class's ``axis``)."""

    def add(cls: type) -> type:
        scorer = cls()
        DATASET_SCORERS.add(name, scorer)
        declare(scorer.axis, metrics)
        return cls

    return add


# -- chunk state: every dataset scorer's partial of one chunk, as one .npz blob ------------------------
SEPARATOR = "::"


def pack_partials(partials: Mapping[str, Partial]) -> bytes:
    """{scorer: {name: array}} -> .npz bytes (no pickles: arrays of numbers, bools and strings only)."""
    flat = {
        f"{scorer}{SEPARATOR}{name}": np.asarray(a) for scorer, p in partials.items() for name, a in p.items()
    }
    buffer = io.BytesIO()
    save: Any = np.savez  # (the stubs take the arrays as positional only)
    save(buffer, **flat)
    return buffer.getvalue()


def unpack_partials(blob: bytes, scorers: Sequence[str]) -> dict[str, Partial]:
    """.npz bytes -> {scorer: {name: array}} for every scorer in ``scorers`` (absent ones get {})."""
    out: dict[str, Partial] = {s: {} for s in scorers}
    with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
        for key in npz.files:
            scorer, name = key.split(SEPARATOR, 1)
            if scorer in out:
                out[scorer][name] = npz[key]
    return out
