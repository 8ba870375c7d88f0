"""Everything the project knows about each metric, in one place.

For every metric: its axis, the tables it is written to, the task types it applies to, its direction
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
from dataclasses import dataclass

from sago_fast.registry import Registry

OPTIONS = ("multiple_choice", "pairwise")
ALL_TASKS = ("multiple_choice", "pairwise", "generation")


@dataclass(frozen=True)
class MetricSpec:
    axis: str
    name: str
    tables: tuple[str, ...]  # item_scores, layer_scores, dataset_scores
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

    def __post_init__(self) -> None:
        if self.headline is not None and "item_scores" not in self.tables:
            raise ValueError(
                f"metric {self.name!r}: a headline metric is read from item_scores (summary, model_scores, "
                "report), so it must be written there"
            )

    @property
    def axis_label(self) -> str:
        return self.label or f"{self.name.replace('_', ' ')} ({self.unit})"

    @property
    def alternative(self) -> str:
        """The direction of instability, as a one-sided test's alternative."""
        return "greater" if self.direction == "higher" else "less"


CATALOGUE: Registry[MetricSpec] = Registry("metric")

UNIT = (0.0, 1.0)  # shares, 0/1 outcomes and probabilities
JS_RANGE = (0.0, math.log(2))  # Jensen-Shannon divergence in nats

_ITEM = ("item_scores",)
_LAYER_ITEM = ("layer_scores", "item_scores")
_DATASET = ("dataset_scores",)

for _spec in (
    # canonical-variant correctness: computed by the statistics from `outputs`, estimate and CI only
    MetricSpec(
        "accuracy",
        "accuracy",
        (),
        direction="lower",
        unit="correct (0/1)",
        label="accuracy (share of examples)",
        bounds=UNIT,
    ),
    MetricSpec(
        "generation",
        "answer_disagreement",
        _ITEM,
        null="tolerance",
        headline=0,
        label="answer disagreement (share of variant pairs)",
        bounds=UNIT,
    ),
    MetricSpec("generation", "correctness_flip", _ITEM, null="tolerance", bounds=UNIT),
    MetricSpec("generation", "flip_rate", _ITEM, null="tolerance", bounds=UNIT),
    MetricSpec("generation", "worst_case", _ITEM, direction="lower", unit="correct (0/1)", bounds=UNIT),
    MetricSpec(
        "generation", "token_f1_disagreement", _ITEM, tasks=("generation",), null="tolerance", bounds=UNIT
    ),
    MetricSpec(
        "activation",
        "dispersion_raw",
        _LAYER_ITEM,
        unit="cosine distance",
        null="replicate",
        sesoi=0.005,
        bounds=(0.0, 2.0),
    ),
    MetricSpec(
        "activation",
        "dispersion",
        _LAYER_ITEM,
        unit="ratio to between-example distance",
        headline=0,
        label="dispersion, mean over layers (cosine dist. ÷ between-example dist.)",
    ),
    MetricSpec("activation", "knn_instability", _LAYER_ITEM, null="tolerance", bounds=UNIT),
    MetricSpec("activation", "replicate_distance", ("layer_scores",), unit="cosine distance"),
    MetricSpec("activation", "cka", _DATASET, direction="lower", unit="linear CKA"),
    MetricSpec("activation", "between_example_distance", _DATASET, unit="cosine distance"),
    MetricSpec(
        "confidence",
        "option_js",
        _ITEM,
        tasks=OPTIONS,
        unit="JS divergence (nats)",
        null="replicate",
        headline=0,
        label="option JS divergence (nats)",
        digits=4,
        sesoi=0.005,
        bounds=JS_RANGE,
    ),
    MetricSpec(
        "confidence",
        "next_token_js",
        _ITEM,
        unit="JS divergence (nats)",
        null="tolerance",
        tolerance=1e-4,
        bounds=JS_RANGE,
    ),
    MetricSpec(
        "confidence",
        "p_gold_sd",
        _ITEM,
        unit="probability",
        null="replicate",
        headline=1,
        label="SD of P(gold) (probability)",
        sesoi=0.01,
        bounds=(0.0, 0.5),
    ),
    MetricSpec(
        "confidence", "p_gold_range", _ITEM, unit="probability", null="replicate", sesoi=0.02, bounds=UNIT
    ),
    MetricSpec("confidence", "margin_flip", _ITEM, tasks=OPTIONS, null="tolerance", bounds=UNIT),
    MetricSpec("confidence", "ece", _DATASET, unit="calibration error"),
    MetricSpec("confidence", "ece_spread", _DATASET, unit="calibration error"),
    MetricSpec(
        "mirroring",
        "position_mirroring",
        _ITEM,
        tasks=("multiple_choice",),
        null="chance",
        headline=1,
        family="option_permutation",
        label="position kept (share of moved answers)",
        bounds=UNIT,
    ),
    MetricSpec(
        "mirroring",
        "position_chance",
        _ITEM,
        tasks=("multiple_choice",),
        family="option_permutation",
        bounds=UNIT,
    ),
    MetricSpec(
        "mirroring",
        "mirroring_log_odds",
        _ITEM,
        tasks=("multiple_choice",),
        unit="log odds",
        family="option_permutation",
    ),
    MetricSpec(
        "mirroring",
        "cue_following",
        _ITEM,
        tasks=OPTIONS,
        unit="probability",
        null="tolerance",
        tolerance=0.0,
        headline=0,
        family="wrong_hint",
        label="shift in P(hinted option) (probability)",
        bounds=(-1.0, 1.0),
    ),
    MetricSpec(
        "mirroring",
        "swap_consistency",
        _ITEM,
        tasks=("pairwise",),
        direction="lower",
        null="tolerance",
        family="pair_swap",
        bounds=UNIT,
    ),
    MetricSpec(
        "mirroring",
        "prompt_echo",
        _ITEM,
        tasks=("generation",),
        null="tolerance",
        headline=2,
        label="prompt echo (share of variants)",
        bounds=UNIT,
    ),
):
    CATALOGUE.add(_spec.name, _spec)


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
                "(add a MetricSpec to sago_fast/axes/catalogue.py)"
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
