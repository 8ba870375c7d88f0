"""Generation-task answers per variant: greedy generation, answer extraction, correctness, P(gold).

answer      = the first non-empty line of the generation, without a leading "Answer:"-style label,
              wrapping quotes or a final full stop (``extract_answer``); for numeric answers (GSM8K) the
              last number in the generation, thousands separators dropped (``extract_number``)
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
from typing import TYPE_CHECKING

import numpy as np

from sago_fast.answers.prompting import ModelPrompts
from sago_fast.answers.scoring import score_pairs
from sago_fast.kernels.agreement import answer_key, number_key
from sago_fast.runtime.decode import Generation, GenerationSettings
from sago_fast.types import Example, Variant

if TYPE_CHECKING:
    from sago_fast.answers.protocol import LanguageModel
    from sago_fast.runtime.model import Prefill


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


NUMBER = re.compile(r"-?[\d,]*\.?\d+")


def extract_number(text: str) -> str:
    """The last number in ``text``, GSM8K-normalised (no thousands separators, no trailing ``.0``); ""
    when there is none (lm-eval's flexible extraction)."""
    found = NUMBER.findall(text)
    return number_key(found[-1]) if found else ""


def extract_for(example: Example, text: str) -> str:
    return extract_number(text) if example.answer_type == "number" else extract_answer(text)


def is_correct(answer: str, references: Sequence[str]) -> bool:
    key = answer_key(answer)
    return bool(key) and any(key == answer_key(ref) for ref in references)


def reference_pairs(
    examples: Sequence[Example], variants: Sequence[Variant], delimiter: str
) -> tuple[list[int], list[str]]:
    """(variant row, delimiter + reference) for every reference answer of every variant."""
    by_id = {e.example_id: e for e in examples}
    rows, continuations = [], []
    for index, variant in enumerate(variants):
        for reference in by_id[variant.example_id].answers:
            rows.append(index)
            continuations.append(delimiter + reference)
    return rows, continuations


def free_answers(
    model: LanguageModel,
    examples: Sequence[Example],
    variants: Sequence[Variant],
    generations: Sequence[Generation],
    rows: Sequence[int],
    loglik: np.ndarray,
) -> list[FreeAnswer]:
    """Extract, compare and score each variant's generation; ``loglik`` of its references (``rows``)."""
    by_id = {e.example_id: e for e in examples}
    best = np.full(len(variants), -np.inf)
    np.maximum.at(best, np.asarray(rows, dtype=np.int64), loglik)
    # every generated text tokenised in one call (for token-F1 between variants)
    text_token_ids = model.tokenizer([g.text for g in generations], add_special_tokens=False)["input_ids"]
    answers = []
    for index, (variant, generation, text_ids) in enumerate(
        zip(variants, generations, text_token_ids, strict=True)
    ):
        answer = extract_for(by_id[variant.example_id], generation.text)
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


def answer_generations(
    model: LanguageModel,
    examples: Sequence[Example],
    variants: Sequence[Variant],
    settings: GenerationSettings,
    token_ids: Sequence[Sequence[int]] | None = None,
    prompts: ModelPrompts | None = None,
) -> list[FreeAnswer]:
    """Generate, extract and score every (generation-task) variant: one prefill per prompt, from which
    the references are scored and greedy decoding continues.

    prompts: what the model reads (default: each variant's plain prompt); token_ids: those prompts'
    ids when already tokenised."""
    prompts = prompts or ModelPrompts.plain(variants)
    if token_ids is None:
        token_ids = (
            model.tokenize(list(prompts.texts), reserve=settings.max_new_tokens)
            if prompts.add_special_tokens
            else prompts.token_ids(model.tokenizer)
        )
    return answer_generations_prefilled(model, examples, variants, settings, prompts, token_ids)[0]


def answer_generations_prefilled(
    model: LanguageModel,
    examples: Sequence[Example],
    variants: Sequence[Variant],
    settings: GenerationSettings,
    prompts: ModelPrompts,
    token_ids: Sequence[Sequence[int]],
) -> tuple[list[FreeAnswer], Prefill]:
    """:func:`answer_generations`, with the prompts' prefill (probe included) it decoded from."""
    rows, continuations = reference_pairs(examples, variants, prompts.delimiter)
    loglik, prefill = score_pairs(model, prompts, token_ids, rows, continuations, settings)
    assert prefill.generations is not None  # asked for with ``settings``
    return free_answers(model, examples, variants, prefill.generations, rows, loglik), prefill
