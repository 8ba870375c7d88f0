"""Every variant's answer: option scoring under each answer mode, or greedy generation, on model prompts.

The answer the axes read is the *primary* one: the run's answer mode for multiple-choice and pairwise
variants, the generated answer for generation tasks. Every mode's answer is kept too (``by_mode``), so
the modes can be compared on the same variants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sago_fast.runtime.free_answers import FreeAnswer, answer_generations
from sago_fast.runtime.generate import GenerationSettings
from sago_fast.runtime.options import (
    ANSWER_MODES,
    DEFAULT_ANSWER_MODE,
    OptionAnswer,
    answer_modes,
    check_answer_mode,
)
from sago_fast.runtime.prompting import ModelPrompts, PromptFormat
from sago_fast.types import Example, Variant

AnyAnswer = OptionAnswer | FreeAnswer


@dataclass(frozen=True)
class AnswerSettings:
    """How a unit's variants are put to the model and answered.

    generation: greedy limits for generation tasks; prompt_format: plain text or chat template (and the
    system prompt); answer_mode: the multiple-choice mode the axes read (all modes are stored).
    """

    generation: GenerationSettings = field(default_factory=GenerationSettings)
    prompt_format: PromptFormat = field(default_factory=PromptFormat)
    answer_mode: str = DEFAULT_ANSWER_MODE

    def __post_init__(self) -> None:
        check_answer_mode(self.answer_mode)


@dataclass(frozen=True)
class UnitAnswers:
    """primary[i]: variant i's answer under the run's mode (or generated); by_mode[i]: every mode's
    answer for option variants, {} for generation variants."""

    primary: list[AnyAnswer]
    by_mode: list[dict[str, OptionAnswer]]


def answer_unit(
    model: Any,
    examples: Sequence[Example],
    variants: Sequence[Variant],
    prompts: ModelPrompts,
    token_ids: Sequence[Sequence[int]],
    settings: AnswerSettings,
    next_logprobs: np.ndarray | None = None,
    modes: Sequence[str] = ANSWER_MODES,
) -> UnitAnswers:
    """Answer every variant on its model prompt; ``token_ids`` (and the probe's ``next_logprobs``, (n,
    vocab)) belong to ``prompts``. modes: the answer modes computed (the run's mode always is)."""
    modes = tuple(dict.fromkeys([*modes, settings.answer_mode]))
    by_id = {e.example_id: e for e in examples}
    with_options = [i for i, v in enumerate(variants) if by_id[v.example_id].has_options]
    free = [i for i, v in enumerate(variants) if not by_id[v.example_id].has_options]
    primary: list[Any] = [None] * len(variants)
    by_mode: list[dict[str, OptionAnswer]] = [{} for _ in variants]
    if with_options:
        chosen = answer_modes(
            model,
            examples,
            [variants[i] for i in with_options],
            ModelPrompts(tuple(prompts.texts[i] for i in with_options), prompts.chat),
            modes=modes,
            prompt_ids=[token_ids[i] for i in with_options],
            next_logprobs=None if next_logprobs is None else next_logprobs[with_options],
        )
        for i, answers in zip(with_options, chosen, strict=True):
            primary[i] = answers[settings.answer_mode]
            by_mode[i] = answers
    if free:
        generated = answer_generations(
            model,
            examples,
            [variants[i] for i in free],
            settings.generation,
            [token_ids[i] for i in free],
            ModelPrompts(tuple(prompts.texts[i] for i in free), prompts.chat),
        )
        for i, answer in zip(free, generated, strict=True):
            primary[i] = answer
    return UnitAnswers(primary, by_mode)


def answer_all(
    model: Any,
    examples: Sequence[Example],
    variants: Sequence[Variant],
    token_ids: Sequence[Sequence[int]],
    generation: GenerationSettings,
) -> list[AnyAnswer]:
    """``cloze`` option answers or greedy generations of variants on their plain prompts, in order."""
    prompts = ModelPrompts(tuple(v.prompt for v in variants), chat=False)
    settings = AnswerSettings(generation=generation)
    return answer_unit(model, examples, variants, prompts, token_ids, settings, modes=("cloze",)).primary
