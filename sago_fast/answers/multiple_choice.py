"""Multiple-choice answers per variant under every answer mode, aligned to option *content*.

Answer modes (``ANSWER_MODES``), each a score per option; the answer is the arg-max (ties: lowest index):

- ``cloze``: loglik(prompt, " " + option text), summed token log-probs (lm-eval ``acc``);
- ``cloze_norm``: the same divided by the option text's length in characters (lm-eval ``acc_norm``);
- ``letter``: loglik(prompt, " " + label) of the label shown at the option's position ("A", "B", ...;
  the MMLU/HELM convention). A label that is one token after the prompt is read from the next-token
  distribution of the prompt's prefill (no extra pass); longer labels are scored on its cache.
  Scores are mapped back to content through the variant's ``option_order``, so position mirroring under
  ``letter`` measures position bias (picking "A" whatever is behind it).

Arrays are indexed by original option index whatever order the variant displays. Under a chat template
the delimiter is "" (see :mod:`sago_fast.answers.prompting`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.special import log_softmax

from sago_fast import defaults
from sago_fast.answers.prompting import ModelPrompts
from sago_fast.answers.scoring import score_pairs
from sago_fast.errors import InputError
from sago_fast.types import Example, Variant

if TYPE_CHECKING:
    from sago_fast.answers.protocol import LanguageModel
    from sago_fast.runtime.model import Prefill


ANSWER_MODES = ("cloze", "cloze_norm", "letter")
DEFAULT_ANSWER_MODE = defaults.ANSWER_MODE


def check_answer_mode(mode: str) -> str:
    if mode not in ANSWER_MODES:
        raise InputError(f"unknown answer mode {mode!r} (known: {', '.join(ANSWER_MODES)})")
    return mode


@dataclass(frozen=True)
class OptionAnswer:
    """One variant's answer under one mode. Arrays are indexed by original option index."""

    option_loglik: np.ndarray  # (n_options,) the mode's score per option (log-likelihood, per char, label)
    option_logprobs: np.ndarray  # (n_options,) log-softmax over options of option_loglik
    answer_index: int  # argmax of option_loglik (ties: lowest index)
    correct: bool
    p_gold: float
    entropy: float  # of the option distribution, nats
    margin: float  # top-1 minus top-2 option log-probability
    mode: str = DEFAULT_ANSWER_MODE


def option_answer(scores: np.ndarray, gold: int, mode: str) -> OptionAnswer:
    """The answer, confidence and spread of one variant from its per-option ``scores`` (content order)."""
    logp = log_softmax(scores)
    ranked = np.sort(logp)[::-1]
    probs = np.exp(logp)
    answer = int(np.argmax(scores))
    return OptionAnswer(
        option_loglik=scores,
        option_logprobs=logp,
        answer_index=answer,
        correct=answer == gold,
        p_gold=float(probs[gold]),
        entropy=float(-(probs * logp).sum()),
        margin=float(ranked[0] - ranked[1]) if len(ranked) > 1 else float("inf"),
        mode=mode,
    )


@dataclass(frozen=True)
class OptionPairs:
    """The (prompt row, continuation) pairs the requested modes score, and where each variant's start.

    cloze_at[r] / letter_at[r]: index of variant r's first option / label pair (-1 when not requested).
    """

    modes: tuple[str, ...]
    rows: list[int]
    continuations: list[str]
    cloze_at: list[int]
    letter_at: list[int]


def option_pairs(
    examples: Sequence[Example], variants: Sequence[Variant], prompts: ModelPrompts, modes: Sequence[str]
) -> OptionPairs:
    """Every option text (cloze modes) and every displayed label (letter) of every variant, each as a
    continuation of its model prompt."""
    for mode in modes:
        check_answer_mode(mode)
    by_id = {e.example_id: e for e in examples}
    rows: list[int] = []
    continuations: list[str] = []
    cloze_at: list[int] = []
    letter_at: list[int] = []
    want_cloze = any(m.startswith("cloze") for m in modes)
    for row, variant in enumerate(variants):
        example = by_id[variant.example_id]
        cloze_at.append(len(rows) if want_cloze else -1)
        if want_cloze:
            for option in example.options:
                rows.append(row)
                continuations.append(prompts.delimiter + option)
        letter_at.append(len(rows) if "letter" in modes else -1)
        if "letter" in modes:
            for label in _labels(variant, example):
                rows.append(row)
                continuations.append(prompts.delimiter + label)
    return OptionPairs(tuple(modes), rows, continuations, cloze_at, letter_at)


def answers_from_scores(
    examples: Sequence[Example], variants: Sequence[Variant], pairs: OptionPairs, loglik: np.ndarray
) -> list[dict[str, OptionAnswer]]:
    """Every mode's answer per variant from the summed log-probs of ``pairs`` (same order)."""
    by_id = {e.example_id: e for e in examples}
    out: list[dict[str, OptionAnswer]] = []
    for row, variant in enumerate(variants):
        example = by_id[variant.example_id]
        n = len(example.options)
        gold = int(example.answer_index)  # type: ignore[arg-type]
        answers: dict[str, OptionAnswer] = {}
        if pairs.cloze_at[row] >= 0:
            cloze = loglik[pairs.cloze_at[row] : pairs.cloze_at[row] + n]
            answers["cloze"] = option_answer(cloze, gold, "cloze")
            chars = np.array([len(o) for o in example.options], dtype=np.float64)
            answers["cloze_norm"] = option_answer(cloze / chars, gold, "cloze_norm")
        if pairs.letter_at[row] >= 0:
            shown = loglik[pairs.letter_at[row] : pairs.letter_at[row] + n]
            by_content = np.empty(n, dtype=np.float64)
            by_content[np.asarray(variant.option_order)] = shown  # position j shows option_order[j]
            answers["letter"] = option_answer(by_content, gold, "letter")
        out.append({m: answers[m] for m in pairs.modes})
    return out


def answer_modes(
    model: LanguageModel,
    examples: Sequence[Example],
    variants: Sequence[Variant],
    prompts: ModelPrompts,
    *,
    modes: Sequence[str] = ANSWER_MODES,
    prompt_ids: Sequence[Sequence[int]] | None = None,
) -> list[dict[str, OptionAnswer]]:
    """Every requested mode's answer for every variant: one prefill per prompt, every option and label
    scored on its cache (:func:`sago_fast.answers.scoring.score_pairs`).

    prompt_ids: the prompts' token ids when already tokenised.
    """
    ids = prompt_ids if prompt_ids is not None else prompts.token_ids(model.tokenizer)
    prompts = prompts.with_heads(model.tokenizer, [v.head_chars for v in variants], ids)
    return answer_modes_prefilled(model, examples, variants, prompts, ids, modes)[0]


def answer_modes_prefilled(
    model: LanguageModel,
    examples: Sequence[Example],
    variants: Sequence[Variant],
    prompts: ModelPrompts,
    prompt_ids: Sequence[Sequence[int]],
    modes: Sequence[str],
) -> tuple[list[dict[str, OptionAnswer]], Prefill]:
    """:func:`answer_modes`, with the prompts' prefill (probe included) it was scored on (a benchmark's
    instruction and demonstrations shared across examples where ``prompts.heads`` says so)."""
    pairs = option_pairs(examples, variants, prompts, modes)
    loglik, prefill = score_pairs(model, prompts, prompt_ids, pairs.rows, pairs.continuations)
    return answers_from_scores(examples, variants, pairs, loglik), prefill


def _labels(variant: Variant, example: Example) -> tuple[str, ...]:
    if len(variant.option_labels) == len(example.options):
        return variant.option_labels
    return tuple(chr(65 + j) for j in range(len(example.options)))
