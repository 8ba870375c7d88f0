"""What each item metric is tested against (the null of ``model_scores.p_value``), as the metric
catalogue (:mod:`sago_fast.axes.catalogue`) states it. Every test is a test of the mean, the figure
``model_scores.estimate`` reports (:func:`sago_fast.stats.methods.mean_inference`).

replicate  continuous axes. The replicate run (replicate 1: each canonical prompt re-run alone, another
           batch composition and no padding) measures float noise per example; it is turned into the value
           the metric would take over the example's V variants if they differed by that noise only (like
           for like, :func:`like_for_like`). The null is the larger of that noise level and the metric's
           smallest effect of practical interest (SESOI, catalogue; ``StatsConfig.sesoi`` overrides):
           on a deterministic run the noise is ~0 and every tiny difference would otherwise be
           "significant". Noise above the SESOI: paired test of (value - noise) > 0 per example.
tolerance  discrete axes: mean beyond the stated tolerance (exact binomial for 0/1 values)
chance     position_mirroring: mean beyond its chance level (paired per example when K varies)
none       estimate and CI only (correctness, normalised scores, log-odds)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from sago_fast.axes.catalogue import metric as catalogue_metric


@dataclass(frozen=True)
class NullSpec:
    kind: str  # replicate | tolerance | chance | none
    alternative: str = "greater"  # the direction of instability
    tolerance: float | None = None  # None: StatsConfig.tolerance; a number: fixed for this metric
    sesoi: float | None = None  # replicate nulls: the smallest effect of practical interest


def null_for(metric: str) -> NullSpec:
    """The null of ``metric``, from the metric catalogue (an unknown metric is an error)."""
    spec = catalogue_metric(metric)
    return NullSpec(spec.null, spec.alternative, spec.tolerance, spec.sesoi)


def like_for_like(metric: str, replicate_value: float, n_variants: int) -> float:
    """The value ``metric`` takes in expectation over ``n_variants`` renderings that differ only by the
    noise one replicate pair shows (``replicate_value``: the pair's figure, or |gap| for sd/range), by the
    scaling the metric declares (``MetricSpec.noise``):

    pair   the metric is a mean over variant pairs of a pairwise figure (dispersion_raw, option_js): its
           expectation is that of one pair, so the replicate pair's value is like for like
    sd     population SD of V values: the pair's gap d has E|d| = 2 sigma / sqrt(pi), so sigma is
           estimated by |d| sqrt(pi) / 2, and E[SD of V] = sigma c4(V) sqrt((V - 1) / V)
    range  range of V values: E = sigma d2(V) (the expected range of V standard normals)"""
    noise = catalogue_metric(metric).noise
    assert noise is not None, f"{metric}: only a metric with a replicate null has replicate noise"
    kind = noise.scaling
    if kind == "pair" or n_variants < 2:
        return replicate_value if kind == "pair" else 0.0
    sigma = replicate_value * math.sqrt(math.pi) / 2
    if kind == "sd":
        return sigma * _c4(n_variants) * math.sqrt((n_variants - 1) / n_variants)
    return sigma * _expected_range(n_variants)


def _c4(n: int) -> float:
    """E[sample SD] / sigma for n normal values (ddof = 1)."""
    return math.sqrt(2 / (n - 1)) * math.exp(math.lgamma(n / 2) - math.lgamma((n - 1) / 2))


@lru_cache(maxsize=64)
def _expected_range(n: int) -> float:
    """d2(n): the expected range of n standard normal values, by numerical integration of
    1 - Phi(x)^n - (1 - Phi(x))^n over the real line."""
    from scipy import integrate, stats

    value, _ = integrate.quad(lambda x: 1 - stats.norm.cdf(x) ** n - stats.norm.sf(x) ** n, -np.inf, np.inf)
    return float(value)
