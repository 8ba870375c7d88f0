"""Confidence stability from answer-position probabilities.

  option_js     = mean pairwise JS divergence between content-aligned option distributions
  next_token_js = mean pairwise JS divergence between full next-token distributions
  p_gold_sd, p_gold_range = population SD and range of P(gold) across variants
  margin_flip   = share of pairs whose gold margin (log P(gold) - max other log P) changes sign
Generation tasks have no options: P(gold) is given per variant (P of the reference answer) and only
next_token_js, p_gold_sd and p_gold_range are computed.
ECE per family is a dataset-level figure (:func:`expected_calibration_error`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sago_fast.axes.items import ExampleView, item_scorer
from sago_fast.axes.records import ExampleOutputs, ItemScore
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
        out += [
            ItemScore(ex.example_id, AXIS, "p_gold_sd", family, float(gold.std())),
            ItemScore(ex.example_id, AXIS, "p_gold_range", family, float(gold.max() - gold.min())),
        ]
        if margins is not None:
            probs = ex.option_probs[mask]
            signs = np.sign(margins[mask])
            i, j = np.triu_indices(int(mask.sum()), 1)
            out += [
                ItemScore(ex.example_id, AXIS, "option_js", family, float(pairwise(probs, "js").mean())),
                ItemScore(ex.example_id, AXIS, "margin_flip", family, float(np.mean(signs[i] != signs[j]))),
            ]
        if next_token_probs is not None:
            js = pairwise(next_token_probs[mask], "js", check=False)
            out.append(ItemScore(ex.example_id, AXIS, "next_token_js", family, float(js.mean())))
    return out


@item_scorer("confidence", AXIS)
def _confidence_item_scores(view: ExampleView) -> list[ItemScore]:
    return confidence_scores(view.outputs, view.families, view.next_token_probs, view.p_gold)


def expected_calibration_error(confidence: np.ndarray, correct: np.ndarray, n_bins: int = 10) -> float:
    """ECE with equal-width confidence bins: sum_b |B_b|/n * |acc(B_b) - conf(B_b)|."""
    confidence = np.asarray(confidence, dtype=float)
    correct = np.asarray(correct, dtype=float)
    bins = np.minimum((confidence * n_bins).astype(int), n_bins - 1)
    ece = 0.0
    for b in range(n_bins):
        in_bin = bins == b
        if in_bin.any():
            ece += in_bin.mean() * abs(correct[in_bin].mean() - confidence[in_bin].mean())
    return float(ece)


def calibration_by_family(
    confidence: np.ndarray, correct: np.ndarray, families: Sequence[str], meaning_preserving: np.ndarray
) -> tuple[dict[str, float], float]:
    """ECE per variant family, and ``ece_spread``: max - min over the families whose variants all
    preserve meaning (each variant's own flag, so a user family marked not meaning preserving is left out
    like ``wrong_hint``). All arrays are per variant of the unit."""
    family_of = np.asarray(families)
    preserving = np.asarray(meaning_preserving, dtype=bool)
    eces = {}
    for family in sorted(set(family_of.tolist())):
        mask = family_of == family
        eces[family] = expected_calibration_error(np.asarray(confidence)[mask], np.asarray(correct)[mask])
    kept = [e for f, e in eces.items() if preserving[family_of == f].all()]
    return eces, float(np.ptp(kept)) if kept else float("nan")
