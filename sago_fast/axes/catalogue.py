"""Everything the project knows about each metric, read from the scorers' declarations.

A metric is declared once, with the scorer that writes it (``metrics=[MetricSpec(...)]`` on its
decorator); the catalogue collects the declarations (:class:`Catalogue` imports the axis modules before
it is read). For every metric: its axis, the tables it is written to, the task types it applies to, its direction
(``higher``: a higher value is less stable; ``lower``: the reverse), a unit/label, the null its
``model_scores`` test uses (``replicate`` noise, a ``tolerance``, ``chance``, or ``none``: estimate and CI
only), and its rank in the axis' headline list (statistics use the first headline metric a dataset has).
The statistics' null hypotheses (:mod:`sago_fast.stats.nulls`) and headline metrics
(:mod:`sago_fast.stats.data`) are read from here; a test checks the README's axes table and every metric
a run writes against it. ``bounds``: the range an example's value lies in, which the anytime-valid
confidence sequences of ``sago run --precision`` need (:func:`sequential_metrics`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sago_fast.registry import Registry

OPTIONS = ("multiple_choice", "pairwise")
ALL_TASKS = ("multiple_choice", "pairwise", "generation")


SCALINGS = ("pair", "sd", "range")


@dataclass(frozen=True)
class ReplicateNoise:
    """How the replicate pass's noise maps onto a metric whose null is ``replicate``.

    source: the replicate pair's per-example figure the statistics read (:data:`NOISE_SOURCES`);
    scaling: what that figure is worth over V variants that differ by noise only
    (:func:`sago_fast.stats.nulls.like_for_like`): ``pair`` (a mean over variant pairs of a pairwise
    figure: the pair's value as it is), ``sd`` (population SD of V values, from the pair's |gap|) or
    ``range`` (range of V values, from the pair's |gap|)."""

    source: str
    scaling: str = "pair"

    def __post_init__(self) -> None:
        if self.source not in NOISE_SOURCES:
            raise ValueError(
                f"unknown replicate noise source {self.source!r} (known: {', '.join(NOISE_SOURCES)})"
            )
        if self.scaling not in SCALINGS:
            raise ValueError(
                f"unknown replicate noise scaling {self.scaling!r} (known: {', '.join(SCALINGS)})"
            )


# the replicate pair's per-example figures the statistics can read (sago_fast.stats.data.replicate_noise)
NOISE_SOURCES = {
    "replicate_distance": "cosine distance between the canonical prompt's two runs, mean over layers (mean pooling)",
    "option_js": "JS divergence between the two runs' option distributions",
    "p_gold_gap": "|P(gold) of run 1 - P(gold) of run 2|",
}


@dataclass(frozen=True)
class MetricSpec:
    """One metric, declared once, with the scorer that writes it (``metrics=`` of :func:`item_scorer`,
    :func:`~sago_fast.axes.levels.layer_scorer`, :func:`~sago_fast.axes.levels.dataset_scorer`), which
    fills in ``axis``."""

    name: str
    tables: tuple[str, ...]  # item_scores, layer_scores, dataset_scores
    axis: str = ""  # the declaring scorer's axis
    tasks: tuple[str, ...] = ALL_TASKS
    direction: str = "higher"  # "higher": higher = less stable; "lower": the reverse
    unit: str = "share"
    null: str = "none"  # replicate | tolerance | chance | none
    tolerance: float | None = None  # a fixed tolerance (None: the statistics' default)
    headline: int | None = None  # rank among the axis' headline metrics (0 first)
    family: str | None = None  # the family its headline figure is read at (None: all meaning-preserving)
    label: str = ""  # axis label with unit in the report (default: "<name> (<unit>)")
    digits: int = 3  # decimals in the run summary
    sesoi: float | None = None  # replicate nulls: smallest effect of practical interest (the null's floor)
    bounds: tuple[float, float] | None = None  # the range of one example's value (None: unbounded)
    noise: ReplicateNoise | None = None  # replicate nulls: where the noise comes from, how it maps

    def __post_init__(self) -> None:
        if self.headline is not None and "item_scores" not in self.tables:
            raise ValueError(
                f"metric {self.name!r}: a headline metric is read from item_scores (summary, model_scores, "
                "report), so it must be written there"
            )
        if (self.null == "replicate") != (self.noise is not None):
            raise ValueError(
                f"metric {self.name!r}: a replicate null needs its noise (noise=ReplicateNoise(...)), and "
                "only a replicate null has one"
            )

    @property
    def axis_label(self) -> str:
        return self.label or f"{self.name.replace('_', ' ')} ({self.unit})"

    @property
    def alternative(self) -> str:
        """The direction of instability, as a one-sided test's alternative."""
        return "greater" if self.direction == "higher" else "less"


class Catalogue(Registry[MetricSpec]):
    """The metrics, as their scorers declare them: reading it first imports the axis modules (which
    declare theirs), so it is complete wherever it is read."""

    def __init__(self) -> None:
        super().__init__("metric")
        self._loading = False

    def _load(self) -> None:
        if not self._loading:
            self._loading = True
            import sago_fast.axes  # noqa: F401  (its modules declare their metrics)

    def get(self, name: str) -> MetricSpec:
        self._load()
        return super().get(name)

    def names(self) -> list[str]:
        self._load()
        return super().names()

    def __contains__(self, name: object) -> bool:
        self._load()
        return super().__contains__(name)


CATALOGUE = Catalogue()


def declare(axis: str, specs: Sequence[MetricSpec]) -> None:
    """Add ``specs`` to the catalogue under ``axis`` (a scorer decorator's ``metrics=``)."""
    for spec in specs:
        if spec.axis and spec.axis != axis:
            raise ValueError(f"metric {spec.name!r} declares axis {spec.axis!r} on a scorer of axis {axis!r}")
        CATALOGUE.add(spec.name, replace(spec, axis=axis))


UNIT = (0.0, 1.0)  # shares, 0/1 outcomes and probabilities
JS_RANGE = (0.0, math.log(2))  # Jensen-Shannon divergence in nats
ITEM = ("item_scores",)
LAYER_ITEM = ("layer_scores", "item_scores")
DATASET = ("dataset_scores",)

# canonical-variant correctness: computed by the statistics from `outputs`, estimate and CI only
declare(
    "accuracy",
    [
        MetricSpec(
            "accuracy",
            (),
            direction="lower",
            unit="correct (0/1)",
            label="accuracy (share of examples)",
            bounds=UNIT,
        )
    ],
)


def metric(name: str) -> MetricSpec:
    """The catalogue entry of ``name`` (an unknown metric is an error, never a silent default)."""
    return CATALOGUE.get(name)


def headline_metrics(axis: str) -> tuple[str, ...]:
    """The axis' headline metrics in order of preference."""
    specs = [CATALOGUE.get(n) for n in CATALOGUE.names()]
    ranked = sorted((s.headline, s.name) for s in specs if s.axis == axis and s.headline is not None)
    return tuple(name for _, name in ranked)


def headline_specs() -> list[MetricSpec]:
    """Every headline metric, axis by axis (in :func:`axes` order) and by rank within an axis."""
    return [CATALOGUE.get(name) for axis in axes() for name in headline_metrics(axis)]


def axes() -> tuple[str, ...]:
    return ("generation", "activation", "confidence", "mirroring")


def check_metrics(axis: str, names: set[str] | frozenset[str]) -> None:
    """Every metric in ``names`` is in the catalogue under ``axis``: a metric missing from the catalogue
    fails loudly, never silently untested."""
    for name in sorted(names):
        if name not in CATALOGUE or CATALOGUE.get(name).axis != axis:
            raise ValueError(
                f"metric {name!r} of axis {axis!r} is not in the metric catalogue under that axis "
                "(declare it with metrics=[MetricSpec(...)] on the scorer that writes it)"
            )


def check_written(axis: str, scores: list) -> list:
    """``scores`` (ItemScore rows of one scorer of ``axis``), after :func:`check_metrics` on them (each
    row's own axis must be ``axis`` too)."""
    check_metrics(axis, {s.metric for s in scores})
    for written_axis in {s.axis for s in scores} - {axis}:
        raise ValueError(f"a scorer of axis {axis!r} wrote rows of axis {written_axis!r}")
    return scores


def precision_limit(paired: bool = False) -> tuple[float, str]:
    """(limit, metric): a sequential half-width must stay below ``limit``, half the range of the widest
    metric a sequential unit follows (a confidence sequence inside a range is never wider than half of it,
    so at ``limit`` every followed metric would be settled before the first example: a unit would stop at
    once). ``paired``: comparisons of two models, whose differences span twice the range."""
    widths = {
        name: CATALOGUE.get(name).bounds[1] - CATALOGUE.get(name).bounds[0]  # type: ignore[index]
        for group in sequential_metrics()
        for name in group
    }
    widest = max(widths, key=lambda n: widths[n])
    return widths[widest] * (1.0 if paired else 0.5), widest


def sequential_metrics() -> tuple[tuple[str, ...], ...]:
    """What a sequential unit follows (``sago run --precision``): groups of candidates, of which a unit
    follows the first it has values for. Accuracy; for each axis its bounded headline metrics in rank
    order or, for an axis whose headline is unbounded (activation: dispersion is a ratio), its first
    bounded item metric; and ``flip_rate``, the figure users quote for the generation axis."""
    groups: list[tuple[str, ...]] = [("accuracy",)]
    for axis in axes():
        specs = [CATALOGUE.get(n) for n in CATALOGUE.names()]
        ranked = [n for n in headline_metrics(axis) if CATALOGUE.get(n).bounds is not None]
        if not ranked:
            ranked = [
                s.name for s in specs if s.axis == axis and s.bounds is not None and "item_scores" in s.tables
            ][:1]
        groups.append(tuple(ranked))
    groups.append(("flip_rate",))
    return tuple(g for g in groups if g)
