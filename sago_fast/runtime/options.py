"""Multiple-choice answers per variant: option log-likelihoods aligned to option *content*.

For a variant, option i's score is loglik(prompt, " " + options[i]) (lm-eval convention), so scores are
indexed by the original option index whatever order the variant displays; the displayed order matters
only to the prompt the model reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import log_softmax

from sago_fast.runtime.scoring import score_continuations
from sago_fast.types import Example, Variant


@dataclass(frozen=True)
class OptionAnswer:
    """One variant's answer. Arrays are indexed by original option index."""

    option_loglik: np.ndarray  # (n_options,) summed continuation log-probs
    option_logprobs: np.ndarray  # (n_options,) log-softmax over options of option_loglik
    answer_index: int  # argmax of option_loglik (ties: lowest index)
    correct: bool
    p_gold: float
    entropy: float  # of the option distribution, nats
    margin: float  # top-1 minus top-2 option log-probability


def answer_variants(
    model: Any, examples: Sequence[Example], variants: Sequence[Variant]
) -> list[OptionAnswer]:
    """Score every option of every (multiple-choice or pairwise) variant in one batched pass."""
    by_id = {e.example_id: e for e in examples}
    contexts: list[str] = []
    continuations: list[str] = []
    for variant in variants:
        example = by_id[variant.example_id]
        for option in example.options:
            contexts.append(variant.prompt)
            continuations.append(" " + option)
    loglik = score_continuations(model, contexts, continuations).loglik
    answers = []
    start = 0
    for variant in variants:
        example = by_id[variant.example_id]
        n = len(example.options)
        scores = loglik[start : start + n]
        start += n
        logp = log_softmax(scores)
        ranked = np.sort(logp)[::-1]
        probs = np.exp(logp)
        answer = int(np.argmax(scores))
        answers.append(
            OptionAnswer(
                option_loglik=scores,
                option_logprobs=logp,
                answer_index=answer,
                correct=answer == example.answer_index,
                p_gold=float(probs[example.answer_index]),
                entropy=float(-(probs * logp).sum()),
                margin=float(ranked[0] - ranked[1]),
            )
        )
    return answers
