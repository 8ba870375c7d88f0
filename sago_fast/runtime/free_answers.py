"""Generation-task answers per variant: greedy generation, answer extraction, correctness, P(gold).

answer      = the first non-empty line of the generation, without a leading "Answer:"-style label,
              wrapping quotes or a final full stop (``extract_answer``)
key         = the comparison form: SQuAD normalisation (lower case, no punctuation, no articles); when that
              leaves nothing (the answer *is* "a" or "the"), lower case without punctuation (``answer_key``)
correct     = the key equals the key of any reference answer (normalised exact match)
p_gold      = max over reference answers of P(" " + reference | prompt) (summed token log-probs, the
              lm-eval continuation convention; no space after a chat template's assistant header), so it
              is comparable across variants of one example
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sago_fast.kernels.agreement import answer_key
from sago_fast.runtime.generate import Generation, GenerationSettings
from sago_fast.runtime.prompting import ModelPrompts
from sago_fast.runtime.scoring import score_continuations
from sago_fast.types import Example, Variant

_LABEL = re.compile(r"^(?:the\s+)?(?:final\s+)?answer\b(?:\s+is\b)?\s*[:\-]?\s*", re.IGNORECASE)


def extract_answer(text: str) -> str:
    """The answer inside a generation (see the module docstring); "" when there is none."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = _LABEL.sub("", line, count=1).strip()
    return line.rstrip(".").strip("\"'`").rstrip(".").strip()


@dataclass(frozen=True)
class FreeAnswer:
    """One variant's generated answer."""

    generation: Generation
    answer: str  # extracted from generation.text
    key: str  # answer_key(answer)
    correct: bool
    p_gold: float  # max over references of P(reference | prompt)
    text_token_ids: tuple[int, ...]  # the generation text re-tokenised (for token-F1 between variants)


def is_correct(answer: str, references: Sequence[str]) -> bool:
    key = answer_key(answer)
    return bool(key) and any(key == answer_key(ref) for ref in references)


def answer_generations(
    model: Any,
    examples: Sequence[Example],
    variants: Sequence[Variant],
    settings: GenerationSettings,
    token_ids: Sequence[Sequence[int]] | None = None,
    prompts: ModelPrompts | None = None,
) -> list[FreeAnswer]:
    """Generate, extract and score every (generation-task) variant.

    prompts: what the model reads (default: each variant's plain prompt); token_ids: those prompts'
    ids when already tokenised."""
    by_id = {e.example_id: e for e in examples}
    prompts = prompts or ModelPrompts(tuple(v.prompt for v in variants), chat=False)
    if token_ids is None:
        token_ids = (
            model.tokenize(list(prompts.texts), reserve=settings.max_new_tokens)
            if prompts.add_special_tokens
            else prompts.token_ids(model.tokenizer)
        )
    generations = model.generate_ids(token_ids, settings)
    contexts, continuations, owner = [], [], []
    for index, variant in enumerate(variants):
        for reference in by_id[variant.example_id].answers:
            contexts.append(prompts.texts[index])
            continuations.append(prompts.delimiter + reference)
            owner.append(index)
    loglik = score_continuations(
        model, contexts, continuations, prompts.move_whitespace, prompts.add_special_tokens
    ).loglik
    best = np.full(len(variants), -np.inf)
    np.maximum.at(best, np.asarray(owner, dtype=np.int64), loglik)
    # every generated text tokenised in one call (for token-F1 between variants)
    text_token_ids = model.tokenizer([g.text for g in generations], add_special_tokens=False)["input_ids"]
    answers = []
    for index, (variant, generation, text_ids) in enumerate(
        zip(variants, generations, text_token_ids, strict=True)
    ):
        answer = extract_answer(generation.text)
        answers.append(
            FreeAnswer(
                generation=generation,
                answer=answer,
                key=answer_key(answer),
                correct=is_correct(answer, by_id[variant.example_id].answers),
                p_gold=float(np.exp(best[index])),
                text_token_ids=tuple(int(t) for t in text_ids),
            )
        )
    return answers
