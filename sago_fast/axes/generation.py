"""Generation consistency from the answers chosen under each variant.

For variants S (canonical + the family's variants, or all meaning-preserving ones):
  answer_disagreement = 1 - mean over pairs of [same answer content]
  correctness_flip    = mean over pairs of |correct_u - correct_v|
  flip_rate           = share of non-canonical variants whose answer differs from the canonical one
  worst_case          = min over variants of correctness (its dataset mean is robust accuracy)
For generation tasks the answers are normalised answer keys (so answer_disagreement is 1 - pairwise
normalised exact match), and
  token_f1_disagreement = 1 - mean over pairs of token-F1 between the generated texts' token ids
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sago_fast.axes.catalogue import ITEM, UNIT, MetricSpec
from sago_fast.axes.items import ExampleView, item_scorer
from sago_fast.axes.scored import ExampleOutputs, ItemScore, weighted_mean
from sago_fast.kernels.agreement import pairwise_agreement

AXIS = "generation"


def _pair_mean(values: np.ndarray, same: bool, weights: np.ndarray | None = None) -> float:
    """Mean over unordered pairs of [v_u == v_v] (same=True) or |v_u - v_v| (same=False), each pair
    weighted by ``weights`` (P,) (None: equally)."""
    n = len(values)
    if n < 2:
        return float("nan")
    i, j = np.triu_indices(n, 1)
    if same:
        return weighted_mean(values[i] == values[j], weights)
    return weighted_mean(np.abs(values[i].astype(float) - values[j].astype(float)), weights)


def generation_scores(ex: ExampleOutputs, families: list[str | None]) -> list[ItemScore]:
    out: list[ItemScore] = []
    for family in families:
        mask = ex.family_mask(family)
        if mask.sum() < 2:
            continue
        answers, correct = ex.answer[mask], ex.correct[mask]
        pairs, each = ex.pair_weights(mask), ex.variant_weights(mask)
        canonical_answer = ex.answer[0]
        rest = answers[1:]  # canonical is variant 0 and always in the mask
        flips = weighted_mean(rest != canonical_answer, None if each is None else each[1:])
        out += [
            ItemScore(
                ex.example_id, AXIS, "answer_disagreement", family, 1.0 - _pair_mean(answers, True, pairs)
            ),
            ItemScore(ex.example_id, AXIS, "correctness_flip", family, _pair_mean(correct, False, pairs)),
            ItemScore(ex.example_id, AXIS, "flip_rate", family, flips),
            ItemScore(ex.example_id, AXIS, "worst_case", family, float(correct.min())),
        ]
    return out


def text_agreement_scores(
    ex: ExampleOutputs, texts: Sequence[Sequence[int]], families: list[str | None]
) -> list[ItemScore]:
    """token_f1_disagreement per family; texts[v] = token ids of variant v's generated text."""
    out: list[ItemScore] = []
    for family in families:
        rows = np.where(ex.family_mask(family))[0]
        if len(rows) < 2:
            continue
        f1 = pairwise_agreement([texts[r] for r in rows], "token_f1")
        agreement = weighted_mean(f1, ex.pair_weights(ex.family_mask(family)))
        out.append(ItemScore(ex.example_id, AXIS, "token_f1_disagreement", family, 1.0 - agreement))
    return out


@item_scorer(
    "generation",
    AXIS,
    metrics=[
        MetricSpec(
            "answer_disagreement",
            ITEM,
            null="tolerance",
            headline=0,
            label="answer disagreement (share of variant pairs)",
            bounds=UNIT,
        ),
        MetricSpec("correctness_flip", ITEM, null="tolerance", bounds=UNIT),
        MetricSpec("flip_rate", ITEM, null="tolerance", bounds=UNIT),
        MetricSpec("worst_case", ITEM, direction="lower", unit="correct (0/1)", bounds=UNIT),
    ],
)
def _generation_item_scores(view: ExampleView) -> list[ItemScore]:
    return generation_scores(view.outputs, view.families)


@item_scorer(
    "token_f1",
    AXIS,
    tasks=("generation",),
    metrics=[MetricSpec("token_f1_disagreement", ITEM, tasks=("generation",), null="tolerance", bounds=UNIT)],
)
def _token_f1_item_scores(view: ExampleView) -> list[ItemScore]:
    assert view.texts is not None, "generation tasks carry their generated texts"
    return text_agreement_scores(view.outputs, view.texts, view.families)
