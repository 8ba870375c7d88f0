"""What each item metric is tested against (the null of ``model_scores.p_value``), as the metric
catalogue (:mod:`sago_fast.axes.catalogue`) states it.

replicate  continuous axes: per example, the metric's value between the two runs of the canonical prompt
           (replicate 1 re-runs it alone: other batch composition and padding); one-sided Wilcoxon
           signed-rank of (value - replicate value) > 0 over examples
tolerance  discrete axes: one-sided Wilcoxon of (value - tolerance) beyond the stated tolerance
chance     position_mirroring: (value - position_chance) > 0, paired per example
none       estimate and CI only (correctness, normalised scores, log-odds)
"""

from __future__ import annotations

from dataclasses import dataclass

from sago_fast.axes.catalogue import metric as catalogue_metric


@dataclass(frozen=True)
class NullSpec:
    kind: str  # replicate | tolerance | chance | none
    alternative: str = "greater"  # the direction of instability
    tolerance: float | None = None  # None: StatsConfig.tolerance; a number: fixed for this metric


def null_for(metric: str) -> NullSpec:
    """The null of ``metric``, from the metric catalogue (an unknown metric is an error)."""
    spec = catalogue_metric(metric)
    return NullSpec(spec.null, spec.alternative, spec.tolerance)
