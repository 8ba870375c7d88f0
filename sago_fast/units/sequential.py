"""Sequential units: stop when the answer is known (``sago run --precision H`` / ``--budget N``).

A sequential unit visits its dataset's examples in one seeded random order (:func:`visiting_order`: a
hash of the seed and the example id, so every model of a run sees the same order and paired comparisons
stay paired), at most ``budget`` of them, chunk by chunk. After each chunk it updates an anytime-valid
confidence sequence (:mod:`sago_fast.stats.confidence_sequences`) for each followed metric (:func:`followed_metrics`)
from the per-example values, in visiting order, on the catalogue's bounds, and stops when every sequence
is within ``precision`` of its estimate (half-width <= H), when the budget is spent, or when the data is.

Everything is a function of the committed values and their order: a resumed unit feeds the values of its
committed chunks again and reaches the same bounds and the same stopping point as an uninterrupted run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from sago_fast.axes.catalogue import metric as metric_spec
from sago_fast.axes.catalogue import precision_limit, sequential_metrics
from sago_fast.axes.scored import ItemScore
from sago_fast.errors import InputError
from sago_fast.stats.confidence_sequences import BettingSequence, Scale, Tuning
from sago_fast.types import Variant
from sago_fast.variants.design import visiting_rank

ACCURACY = "accuracy"

# Why a sequential unit stopped (``units.stop_reason``), every reason in one place.
PRECISION = "precision"  # every followed metric within the wanted half-width
SEPARATED = "separated"  # every comparison with a neighbouring model settled (--until-separated)
BUDGET = "budget"  # the examples allowed by --budget are visited
EXHAUSTED = "exhausted"  # every example is visited
STOP_REASONS = (PRECISION, SEPARATED, BUDGET, EXHAUSTED)


@dataclass(frozen=True)
class SequentialSettings:
    """precision: the wanted half-width of every followed metric, in the metric's units (None: none);
    budget: at most this many examples per (model, dataset) (None: all); alpha: 1 - the sequences'
    coverage; seed: the visiting order's seed; until_separated: the units stop when their comparisons
    with the neighbouring models are settled instead (:mod:`sago_fast.units.separation`), ``precision``
    then being the difference's half-width that settles a comparison; cells_until_known: a sampled design's
    unit renders its variant cells only while a followed stability metric is wider than ``precision``,
    and only canonical renderings once every one is known (accuracy then sets the pace)."""

    precision: float | None = None
    budget: int | None = None
    alpha: float = 0.05
    seed: int = 0
    until_separated: bool = False
    cells_until_known: bool = False

    def __post_init__(self) -> None:
        if self.precision is not None:
            limit, metric = precision_limit(paired=self.until_separated)
            if not (isinstance(self.precision, (int, float)) and 0 < self.precision < limit):
                span = "of a difference of" if self.until_separated else "of"
                raise InputError(
                    f"--precision (precision) must be a half-width above 0 and below {limit:.4g} (half the "
                    f"range {span} {metric}, the widest followed metric: at that width every metric is "
                    f"settled before any example is seen), not {self.precision!r}"
                )
        if self.budget is not None and not (isinstance(self.budget, int) and self.budget >= 1):
            raise InputError(f"--budget (budget) must be a positive number of examples, not {self.budget!r}")
        if not 0 < self.alpha < 1:
            raise InputError(f"alpha must be in (0, 1), not {self.alpha!r}")
        if self.until_separated and self.precision is None:
            raise InputError(
                "--until-separated needs --precision H: a comparison is settled once the sign of the "
                "difference is known or its half-width is within H"
            )

    @property
    def active(self) -> bool:
        return self.precision is not None or self.budget is not None


def visiting_order(variants: Sequence[Variant], seed: int) -> list[Variant]:
    """``variants`` grouped by example, the examples in the seeded order (by sha256 of seed and example
    id: independent of the dataset's row order and of the model), each example's variants as given."""
    by_example: dict[str, list[Variant]] = {}
    for variant in variants:
        by_example.setdefault(variant.example_id, []).append(variant)

    ordered = sorted(by_example, key=lambda example_id: visiting_rank(seed, example_id))
    return [v for example_id in ordered for v in by_example[example_id]]


def visited_variants(variants: Sequence[Variant], settings: SequentialSettings) -> list[Variant]:
    """What a sequential unit may visit: the variants in visiting order, within the budget."""
    return within_budget(visiting_order(variants, settings.seed), settings.budget)


def metric_sequence(
    name: str, alpha: float, precision: float | None, horizon: int, *, paired: bool = False
) -> tuple[Scale, BettingSequence]:
    """A confidence sequence for ``name`` on its catalogue bounds (``paired``: a difference of two models,
    on twice the range, centred on 0), tuned for ``precision`` within ``horizon`` examples."""
    bounds = metric_spec(name).bounds
    assert bounds is not None, f"{name} is followed but has no bounds (followed_metrics keeps bounded ones)"
    low, high = bounds
    scale = Scale(-(high - low), high - low) if paired else Scale(low, high)
    tuning = Tuning(scale.width_to_unit(precision) if precision else None, horizon)
    return scale, BettingSequence(alpha, tuning)


def within_budget(variants: Sequence[Variant], budget: int | None) -> list[Variant]:
    """The variants of the first ``budget`` examples (in the order given)."""
    if budget is None:
        return list(variants)
    kept: set[str] = set()
    out = []
    for variant in variants:
        if variant.example_id not in kept and len(kept) >= budget:
            continue
        kept.add(variant.example_id)
        out.append(variant)
    return out


def followed_metrics(available: set[str]) -> tuple[str, ...]:
    """The metrics a unit follows, given those its first chunk has values for: of each group of
    :func:`~sago_fast.axes.catalogue.sequential_metrics`, the first available."""
    chosen = []
    for group in sequential_metrics():
        first = next((name for name in group if name in available), None)
        if first is not None:
            chosen.append(first)
    return tuple(chosen)


ChunkValues = dict[str, dict[str, float]]  # metric -> example id -> value, in the chunk's example order


def chunk_values(
    example_ids: Sequence[str], canonical_correct: Sequence[bool], items: Sequence[ItemScore]
) -> ChunkValues:
    """Per followed-capable metric, its per-example values by example id, in the chunk's example order
    (examples without a finite value left out): accuracy from the canonical answers, the rest from the
    chunk's item scores at the family the catalogue reads the metric at."""
    wanted = {name for group in sequential_metrics() for name in group} - {ACCURACY}
    found: dict[tuple[str, str], float] = {}
    for score in items:
        if (
            score.metric in wanted
            and score.family == metric_spec(score.metric).family
            and np.isfinite(score.value)
        ):
            found[(score.metric, score.example_id)] = float(score.value)
    values: ChunkValues = {
        ACCURACY: {e: float(c) for e, c in zip(example_ids, canonical_correct, strict=True)}
    }
    for name in sorted(wanted):
        present = {e: found[(name, e)] for e in example_ids if (name, e) in found}
        if present:
            values[name] = present
    return values


@dataclass(frozen=True)
class MetricBounds:
    """One followed metric's confidence sequence after a chunk."""

    metric: str
    n: int  # examples with a value so far
    estimate: float
    lower: float
    upper: float

    @property
    def half_width(self) -> float:
        return (self.upper - self.lower) / 2


@dataclass
class SequentialTracker:
    """The followed metrics' confidence sequences of one unit, fed chunk by chunk (in visiting order).

    horizon: the most examples the unit can visit (budget or data), which the bets are tuned within."""

    settings: SequentialSettings
    horizon: int
    metrics: tuple[str, ...] = ()
    n_examples: int = 0
    sequences: dict[str, BettingSequence] = field(default_factory=dict)
    scales: dict[str, Scale] = field(default_factory=dict)
    values: dict[str, list[float]] = field(default_factory=dict)

    def add_chunk(self, chunk: Mapping[str, Mapping[str, float]]) -> list[MetricBounds]:
        """Feed one chunk's values (:func:`chunk_values`); returns every followed metric's bounds now."""
        if not self.metrics:
            self.metrics = followed_metrics(set(chunk))
            for name in self.metrics:
                self.scales[name], self.sequences[name] = metric_sequence(
                    name, self.settings.alpha, self.settings.precision, self.horizon
                )
                self.values[name] = []
        self.n_examples += len(chunk.get(ACCURACY, ()))
        for name in self.metrics:
            new = list(chunk.get(name, {}).values())
            self.sequences[name].extend(self.scales[name].to_unit(new))
            self.values[name] += new
        return self.bounds()

    def bounds(self) -> list[MetricBounds]:
        out = []
        for name in self.metrics:
            scale = self.scales[name]
            lower, upper = self.sequences[name].bounds()
            seen = self.values[name]
            out.append(
                MetricBounds(
                    name,
                    len(seen),
                    float(np.mean(seen)) if seen else float("nan"),
                    scale.from_unit(lower),
                    scale.from_unit(upper),
                )
            )
        return out

    @property
    def settled(self) -> bool:
        """Every followed metric within the wanted precision (never, without one)."""
        wanted = self.settings.precision
        if wanted is None or not self.metrics:
            return False
        return all(b.half_width <= wanted for b in self.bounds())

    @property
    def stability_known(self) -> bool:
        """Under ``cells_until_known``: every followed metric but accuracy within the wanted precision, so
        the next chunks need no variant cells. Decided on the chunks already seen, before the next is
        drawn, so the sequences stay valid."""
        wanted = self.settings.precision
        if not self.settings.cells_until_known or wanted is None:
            return False
        stability = [b for b in self.bounds() if b.metric != ACCURACY]
        return bool(stability) and all(b.half_width <= wanted for b in stability)

    def end_reason(self, n_available: int) -> str:
        """Why the unit ended when no stop rule stopped it: its budget, or its data, ran out."""
        return BUDGET if self.horizon < n_available else EXHAUSTED


def own_precision(unit_id: str, tracker: SequentialTracker) -> str | None:
    """The default stop rule: every followed metric's sequence within the wanted half-width."""
    return PRECISION if tracker.settled else None


def start_sequence(
    variants: Sequence[Variant], settings: SequentialSettings, committed: Sequence[str | None] = ()
) -> tuple[list[Variant], SequentialTracker | None]:
    """The variants a unit visits, in visiting order within the budget, and its tracker, fed the values
    of the chunks an earlier invocation committed (``unit_chunks.sequence_values``, in chunk order).
    Not sequential: the variants as given and no tracker."""
    if not settings.active:
        return list(variants), None
    ordered = visited_variants(variants, settings)
    tracker = SequentialTracker(settings, horizon=len({v.example_id for v in ordered}))
    for text in committed:
        tracker.add_chunk(decode_values(text))
    return ordered, tracker


def encode_values(values: Mapping[str, Mapping[str, float]]) -> str:
    """A chunk's followed values as stored in ``unit_chunks.sequence_values``: JSON, metric -> example id
    -> value (exact floats, the examples in chunk order)."""
    return json.dumps({k: dict(values[k]) for k in sorted(values)})  # example ids keep their order


def decode_values(text: str | None) -> dict[str, dict[str, float]]:
    if not text:
        return {}
    return {k: {e: float(x) for e, x in v.items()} for k, v in json.loads(text).items()}
