"""Response mirroring: does the answer follow the variant's form instead of its content?

position_mirroring  = among option permutations that move the canonical answer, the share where the
                      model keeps the canonical answer's *position* (chance: 1/K, stored as position_chance)
mirroring_log_odds  = log((positions kept + 1/2) / (contents kept + 1/2)) over those variants
cue_following       = mean over wrong-hint variants of P_hint(X) - P_canonical(X), X = the hinted option
swap_consistency    = pairwise tasks: share of item swaps after which the verdict is the same content
                      (higher = more consistent; the one score where higher is better)
prompt_echo         = generation tasks: share of variants whose (wrong) answer is copied from the
                      variant's own prompt, i.e. the answer key is a whole-word span of the prompt's key
                      (per family, and over all meaning-preserving variants with family NULL)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sago_fast.axes.catalogue import ITEM, OPTIONS, UNIT, MetricSpec
from sago_fast.axes.items import ExampleView, item_scorer
from sago_fast.axes.scored import ExampleOutputs, ItemScore, weighted_mean
from sago_fast.kernels.agreement import answer_key

AXIS = "mirroring"


def mirroring_scores(ex: ExampleOutputs) -> list[ItemScore]:
    out: list[ItemScore] = []
    fam = np.asarray(ex.families)
    canonical_answer = int(ex.answer[0])
    canonical_position = int(np.where(ex.option_order[0] == canonical_answer)[0][0])

    perm = np.where(fam == "option_permutation")[0]
    moved = [
        v for v in perm if int(np.where(ex.option_order[v] == canonical_answer)[0][0]) != canonical_position
    ]
    if moved:
        position_kept = sum(int(ex.option_order[v][canonical_position] == ex.answer[v]) for v in moved)
        content_kept = sum(int(ex.answer[v] == canonical_answer) for v in moved)
        out += [
            ItemScore(
                ex.example_id, AXIS, "position_mirroring", "option_permutation", position_kept / len(moved)
            ),
            ItemScore(ex.example_id, AXIS, "position_chance", "option_permutation", 1.0 / ex.n_options),
            ItemScore(
                ex.example_id,
                AXIS,
                "mirroring_log_odds",
                "option_permutation",
                math.log((position_kept + 0.5) / (content_kept + 0.5)),
            ),
        ]
    hints = [v for v in np.where(fam == "wrong_hint")[0] if ex.hint_index[v] >= 0]
    if hints:
        shift = [ex.option_probs[v, ex.hint_index[v]] - ex.option_probs[0, ex.hint_index[v]] for v in hints]
        out.append(ItemScore(ex.example_id, AXIS, "cue_following", "wrong_hint", float(np.mean(shift))))
    swaps = np.where(fam == "pair_swap")[0]
    if len(swaps):
        consistent = np.mean([ex.answer[v] == canonical_answer for v in swaps])
        out.append(ItemScore(ex.example_id, AXIS, "swap_consistency", "pair_swap", float(consistent)))
    return out


def prompt_echo_scores(
    ex: ExampleOutputs, prompts: Sequence[str], families: list[str | None]
) -> list[ItemScore]:
    """prompt_echo per family for a generation task; ``ex.answer`` holds answer keys, prompts[v] the
    rendered prompt of variant v."""
    echo = np.array(
        [
            bool(key) and not correct and f" {key} " in f" {answer_key(prompt)} "
            for key, correct, prompt in zip(ex.answer, ex.correct, prompts, strict=True)
        ]
    )
    out: list[ItemScore] = []
    for family in families:
        mask = ex.family_mask(family)
        share = weighted_mean(echo[mask], ex.variant_weights(mask))
        out.append(ItemScore(ex.example_id, AXIS, "prompt_echo", family, share))
    return out


@item_scorer(
    "mirroring",
    AXIS,
    tasks=("multiple_choice", "pairwise"),
    metrics=[
        MetricSpec(
            "position_mirroring",
            ITEM,
            tasks=("multiple_choice",),
            null="chance",
            headline=1,
            family="option_permutation",
            label="position kept (share of moved answers)",
            bounds=UNIT,
        ),
        MetricSpec(
            "position_chance", ITEM, tasks=("multiple_choice",), family="option_permutation", bounds=UNIT
        ),
        MetricSpec(
            "mirroring_log_odds",
            ITEM,
            tasks=("multiple_choice",),
            unit="log odds",
            family="option_permutation",
        ),
        MetricSpec(
            "cue_following",
            ITEM,
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
            "swap_consistency",
            ITEM,
            tasks=("pairwise",),
            direction="lower",
            null="tolerance",
            family="pair_swap",
            bounds=UNIT,
        ),
    ],
)
def _mirroring_item_scores(view: ExampleView) -> list[ItemScore]:
    return mirroring_scores(view.outputs)


@item_scorer(
    "prompt_echo",
    AXIS,
    tasks=("generation",),
    metrics=[
        MetricSpec(
            "prompt_echo",
            ITEM,
            tasks=("generation",),
            null="tolerance",
            headline=2,
            label="prompt echo (share of variants)",
            bounds=UNIT,
        )
    ],
)
def _prompt_echo_item_scores(view: ExampleView) -> list[ItemScore]:
    return prompt_echo_scores(view.outputs, view.prompts, view.families)
