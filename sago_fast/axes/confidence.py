"""Confidence stability from answer-position probabilities.

  option_js     = mean pairwise JS divergence between content-aligned option distributions
  next_token_js = mean pairwise JS divergence between full next-token distributions
  p_gold_diff   = mean pairwise |P_u(gold) - P_v(gold)| between renderings (a pair mean: unbiased for
                  the full design's value under a sampled one)
  p_gold_sd, p_gold_range = population SD and range of P(gold) across variants
  margin_flip   = share of pairs whose gold margin (log P(gold) - max other log P) changes sign
Generation tasks have no options: P(gold) is given per variant (P of the reference answer) and only
next_token_js, p_gold_diff, p_gold_sd and p_gold_range are computed.
ECE per family and its spread are dataset-level figures, accumulated over chunks (:class:`Calibration`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from sago_fast.axes.catalogue import DATASET, ITEM, JS_RANGE, OPTIONS, UNIT, MetricSpec, ReplicateNoise
from sago_fast.axes.items import ExampleView, item_scorer
from sago_fast.axes.levels import ChunkView, Partial, UnitContext, dataset_scorer
from sago_fast.axes.scored import DatasetScore, ExampleOutputs, ItemScore, ScoredRows, weighted_mean
from sago_fast.kernels import pairwise

AXIS = "confidence"


def gold_margin(option_probs: np.ndarray, gold: int) -> np.ndarray:
    """(V, K) -> (V,): log P(gold) - max over other options of log P."""
    logp = np.log(np.clip(option_probs, 1e-300, None))
    others = np.delete(logp, gold, axis=1)
    return logp[:, gold] - others.max(axis=1)


def confidence_scores(
    ex: ExampleOutputs,
    families: list[str | None],
    next_token_probs: np.ndarray | None = None,
    p_gold: np.ndarray | None = None,
) -> list[ItemScore]:
    """next_token_probs: (V, vocab) probabilities at the answer position, or None to skip next_token_js.
    p_gold: (V,) P(gold) per variant; default the gold option's probability (needed without options)."""
    out: list[ItemScore] = []
    has_options = ex.n_options > 0
    if p_gold is None:
        p_gold = ex.option_probs[:, ex.gold]
    margins = gold_margin(ex.option_probs, ex.gold) if has_options else None
    for family in families:
        mask = ex.family_mask(family)
        if mask.sum() < 2:
            continue
        gold = p_gold[mask]
        weights = ex.pair_weights(mask)
        i, j = np.triu_indices(int(mask.sum()), 1)
        out += [
            ItemScore(
                ex.example_id, AXIS, "p_gold_diff", family, weighted_mean(np.abs(gold[i] - gold[j]), weights)
            ),
            ItemScore(ex.example_id, AXIS, "p_gold_sd", family, _population_sd(gold, weights, ex, mask)),
            ItemScore(ex.example_id, AXIS, "p_gold_range", family, float(gold.max() - gold.min())),
        ]
        if margins is not None:
            probs = ex.option_probs[mask]
            signs = np.sign(margins[mask])
            js = weighted_mean(pairwise(probs, "js"), weights)
            out += [
                ItemScore(ex.example_id, AXIS, "option_js", family, js),
                ItemScore(
                    ex.example_id, AXIS, "margin_flip", family, weighted_mean(signs[i] != signs[j], weights)
                ),
            ]
        if next_token_probs is not None:
            js = weighted_mean(pairwise(next_token_probs[mask], "js", check=False), weights)
            out.append(ItemScore(ex.example_id, AXIS, "next_token_js", family, js))
    return out


def _population_sd(
    values: np.ndarray, weights: np.ndarray | None, ex: ExampleOutputs, mask: np.ndarray
) -> float:
    """The population SD of ``values`` over the variants the full design renders: the plain SD under the
    full design; under a sampled one, from the pair-weighted mean of (x_u - x_v)^2 / 2 (the variance with
    n - 1, unbiased over the draw) scaled by (N - 1) / N, N = the full design's variant count (the sum of
    1 / inclusion). The variance is unbiased; its square root is biased low (by Jensen's inequality: -17% at
    m = 3 of 10 families on MMLU), so read this figure from the full design."""
    if weights is None:
        return float(values.std())
    i, j = np.triu_indices(len(values), 1)
    n_full = float(np.sum(1.0 / ex.inclusion[mask]))  # type: ignore[index]
    half_squares = weighted_mean((values[i] - values[j]) ** 2 / 2.0, weights)
    return float(np.sqrt(half_squares * (n_full - 1.0) / n_full))


@item_scorer(
    "confidence",
    AXIS,
    metrics=[
        MetricSpec(
            "option_js",
            ITEM,
            tasks=OPTIONS,
            unit="JS divergence (nats)",
            null="replicate",
            headline=0,
            label="option JS divergence (nats)",
            digits=4,
            sesoi=0.005,
            bounds=JS_RANGE,
            noise=ReplicateNoise("option_js", "pair"),
        ),
        MetricSpec(
            "next_token_js",
            ITEM,
            unit="JS divergence (nats)",
            null="tolerance",
            tolerance=1e-4,
            bounds=JS_RANGE,
        ),
        MetricSpec(
            "p_gold_diff",
            ITEM,
            unit="probability",
            null="replicate",
            headline=1,
            label="|difference| of P(gold) between renderings (probability)",
            sesoi=0.01,
            bounds=UNIT,
            noise=ReplicateNoise("p_gold_gap", "pair"),
        ),
        MetricSpec(
            "p_gold_sd",
            ITEM,
            unit="probability",
            null="replicate",
            sesoi=0.01,
            bounds=(0.0, 0.5),
            noise=ReplicateNoise("p_gold_gap", "sd"),
        ),
        MetricSpec(
            "p_gold_range",
            ITEM,
            unit="probability",
            null="replicate",
            sesoi=0.02,
            bounds=UNIT,
            noise=ReplicateNoise("p_gold_gap", "range"),
        ),
        MetricSpec("margin_flip", ITEM, tasks=OPTIONS, null="tolerance", bounds=UNIT),
    ],
)
def _confidence_item_scores(view: ExampleView) -> list[ItemScore]:
    return confidence_scores(view.outputs, view.families, view.next_token_probs, view.p_gold)


ECE_BINS = 10


def calibration_bins(
    confidence: np.ndarray, correct: np.ndarray, n_bins: int = ECE_BINS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Equal-width confidence bins -> (count, sum of confidence, sum of correct), each (n_bins,): what
    ECE needs, and additive over chunks."""
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    bins = np.minimum((confidence * n_bins).astype(int), n_bins - 1)
    return (
        np.bincount(bins, minlength=n_bins).astype(np.float64),
        np.bincount(bins, weights=confidence, minlength=n_bins),
        np.bincount(bins, weights=correct, minlength=n_bins),
    )


def ece_from_bins(count: np.ndarray, confidence_sum: np.ndarray, correct_sum: np.ndarray) -> float:
    """sum_b |B_b|/n * |acc(B_b) - conf(B_b)| = sum_b |sum correct - sum confidence| / n."""
    n = count.sum()
    return float(np.abs(correct_sum - confidence_sum).sum() / n) if n else float("nan")


def expected_calibration_error(confidence: np.ndarray, correct: np.ndarray, n_bins: int = ECE_BINS) -> float:
    """ECE with equal-width confidence bins: sum_b |B_b|/n * |acc(B_b) - conf(B_b)|."""
    return ece_from_bins(*calibration_bins(confidence, correct, n_bins))


def ece_spread(eces: Mapping[str, float], preserving: Mapping[str, bool]) -> float:
    """max - min ECE over the families whose variants all preserve meaning (each variant's own flag, so
    a family marked not meaning preserving, like ``wrong_hint``, is left out)."""
    kept = [e for f, e in eces.items() if preserving[f]]
    return float(np.ptp(kept)) if kept else float("nan")


def calibration_by_family(
    confidence: np.ndarray, correct: np.ndarray, families: Sequence[str], meaning_preserving: np.ndarray
) -> tuple[dict[str, float], float]:
    """ECE per variant family and ``ece_spread``, from per-variant arrays of one unit."""
    family_of = np.asarray(families)
    preserving = np.asarray(meaning_preserving, dtype=bool)
    eces, kept = {}, {}
    for family in sorted(set(family_of.tolist())):
        mask = family_of == family
        eces[family] = expected_calibration_error(np.asarray(confidence)[mask], np.asarray(correct)[mask])
        kept[family] = bool(preserving[mask].all())
    return eces, ece_spread(eces, kept)


@dataset_scorer(
    "calibration",
    metrics=[
        MetricSpec("ece", DATASET, unit="calibration error"),
        MetricSpec("ece_spread", DATASET, unit="calibration error"),
    ],
)
class Calibration:
    """ECE per family and its spread: bin counts and sums per chunk, exact at the end."""

    axis = AXIS

    def partial(self, chunk: ChunkView) -> Partial:
        out: Partial = {}
        for family in sorted(set(chunk.family.tolist())):
            mask = chunk.family == family
            count, confidence_sum, correct_sum = calibration_bins(chunk.confidence[mask], chunk.correct[mask])
            out[f"{family}@bins"] = np.stack([count, confidence_sum, correct_sum])  # (3, n_bins)
            out[f"{family}@preserving"] = np.array(bool(chunk.meaning_preserving[mask].all()))
        return out

    def finish(self, partials: Sequence[Mapping[str, np.ndarray]], context: UnitContext) -> ScoredRows:
        bins: dict[str, np.ndarray] = {}
        preserving: dict[str, bool] = {}
        for partial in partials:
            for name, value in partial.items():
                family, field = name.rsplit("@", 1)
                if field == "bins":
                    bins[family] = bins[family] + value if family in bins else value.copy()
                else:
                    preserving[family] = preserving.get(family, True) and bool(value)
        eces = {family: ece_from_bins(*bins[family]) for family in sorted(bins)}
        rows = ScoredRows()
        rows.datasets += [DatasetScore(AXIS, "ece", f, None, None, e) for f, e in eces.items()]
        if eces:
            rows.datasets.append(
                DatasetScore(AXIS, "ece_spread", None, None, None, ece_spread(eces, preserving))
            )
        return rows
