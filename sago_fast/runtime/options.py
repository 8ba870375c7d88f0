"""Multiple-choice answers per variant under every answer mode, aligned to option *content*.

Answer modes (``ANSWER_MODES``), each a score per option; the answer is the arg-max (ties: lowest index):

- ``cloze``: loglik(prompt, " " + option text), summed token log-probs (lm-eval ``acc``);
- ``cloze_norm``: the same divided by the option text's length in characters (lm-eval ``acc_norm``);
- ``letter``: loglik(prompt, " " + label) of the label shown at the option's position ("A", "B", ...;
  the MMLU/HELM convention). A label that is one token after the prompt is read from the next-token
  distribution the probe already computed (no extra pass); longer labels are scored as continuations.
  Scores are mapped back to content through the variant's ``option_order``, so position mirroring under
  ``letter`` measures position bias (picking "A" whatever is behind it).

Arrays are indexed by original option index whatever order the variant displays. Under a chat template
the delimiter is "" (see :mod:`sago_fast.runtime.prompting`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import log_softmax

from sago_fast.errors import InputError
from sago_fast.runtime.prompting import ModelPrompts
from sago_fast.runtime.scoring import encode_pair, score_continuations
from sago_fast.types import Example, Variant

ANSWER_MODES = ("cloze", "cloze_norm", "letter")
DEFAULT_ANSWER_MODE = "cloze"


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


def answer_variants(
    model: Any, examples: Sequence[Example], variants: Sequence[Variant]
) -> list[OptionAnswer]:
    """``cloze`` answers of every (multiple-choice or pairwise) variant on its plain prompt."""
    prompts = ModelPrompts(tuple(v.prompt for v in variants), chat=False)
    return [a["cloze"] for a in answer_modes(model, examples, variants, prompts, modes=("cloze",))]


def answer_modes(
    model: Any,
    examples: Sequence[Example],
    variants: Sequence[Variant],
    prompts: ModelPrompts,
    *,
    modes: Sequence[str] = ANSWER_MODES,
    prompt_ids: Sequence[Sequence[int]] | None = None,
    next_logprobs: np.ndarray | None = None,
) -> list[dict[str, OptionAnswer]]:
    """Every requested mode's answer for every variant, in one batched scoring pass.

    prompt_ids, next_logprobs: (n, vocab) the probe's tokens and next-token log-probs of ``prompts``;
    with them, single-token labels cost no forward pass.
    """
    for mode in modes:
        check_answer_mode(mode)
    by_id = {e.example_id: e for e in examples}
    contexts: list[str] = []
    continuations: list[str] = []
    cloze_at: list[int] = []  # first pair of each variant's options
    letter_at: list[int] = []  # first pair of each variant's labels (-1: read from next_logprobs)
    letter_direct: list[np.ndarray | None] = []
    want_cloze = any(m.startswith("cloze") for m in modes)
    for row, (variant, text) in enumerate(zip(variants, prompts.texts, strict=True)):
        example = by_id[variant.example_id]
        if want_cloze:
            cloze_at.append(len(contexts))
            for option in example.options:
                contexts.append(text)
                continuations.append(prompts.delimiter + option)
        if "letter" in modes:
            labels = _labels(variant, example)
            direct = None
            if prompt_ids is not None and next_logprobs is not None:
                direct = _single_token_scores(
                    model.tokenizer, text, labels, prompts, prompt_ids[row], next_logprobs[row]
                )
            letter_direct.append(direct)
            letter_at.append(-1 if direct is not None else len(contexts))
            if direct is None:
                for label in labels:
                    contexts.append(text)
                    continuations.append(prompts.delimiter + label)
    loglik = (
        score_continuations(
            model, contexts, continuations, prompts.move_whitespace, prompts.add_special_tokens
        ).loglik
        if contexts
        else np.empty(0)
    )
    out: list[dict[str, OptionAnswer]] = []
    for row, variant in enumerate(variants):
        example = by_id[variant.example_id]
        n = len(example.options)
        gold = int(example.answer_index)  # type: ignore[arg-type]
        answers: dict[str, OptionAnswer] = {}
        if want_cloze:
            cloze = loglik[cloze_at[row] : cloze_at[row] + n]
            if "cloze" in modes:
                answers["cloze"] = option_answer(cloze, gold, "cloze")
            if "cloze_norm" in modes:
                chars = np.array([len(o) for o in example.options], dtype=np.float64)
                answers["cloze_norm"] = option_answer(cloze / chars, gold, "cloze_norm")
        if "letter" in modes:
            shown = letter_direct[row]
            if shown is None:
                shown = loglik[letter_at[row] : letter_at[row] + n]
            by_content = np.empty(n, dtype=np.float64)
            by_content[np.asarray(variant.option_order)] = shown  # position j shows option_order[j]
            answers["letter"] = option_answer(by_content, gold, "letter")
        out.append({m: answers[m] for m in modes})
    return out


def _labels(variant: Variant, example: Example) -> tuple[str, ...]:
    if len(variant.option_labels) == len(example.options):
        return variant.option_labels
    return tuple(chr(65 + j) for j in range(len(example.options)))


def _single_token_scores(
    tokenizer: Any,
    text: str,
    labels: Sequence[str],
    prompts: ModelPrompts,
    prompt_ids: Sequence[int],
    next_logprobs: np.ndarray,
) -> np.ndarray | None:
    """Each label's log-prob read from the prompt's next-token distribution, when every label is one
    token right after exactly the probed prompt tokens; None otherwise (scored as continuations)."""
    scores = np.empty(len(labels), dtype=np.float64)
    for j, label in enumerate(labels):
        context, continuation = encode_pair(
            tokenizer,
            text,
            prompts.delimiter + label,
            move_whitespace=prompts.move_whitespace,
            add_special_tokens=prompts.add_special_tokens,
        )
        if len(continuation) != 1 or list(context) != list(prompt_ids):
            return None
        scores[j] = float(next_logprobs[continuation[0]])
    return scores
