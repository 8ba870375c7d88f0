"""Every variant's answer: option scoring under each answer mode, or greedy generation, on model prompts.

Each prompt goes through the model once: that prefill gives the probe (pooled hidden states, next-token
distribution) and the KV cache every option, label and reference is scored on, and greedy generation
continues from it. The answer the axes read is the *primary* one: the run's answer mode for multiple-choice and pairwise
variants, the generated answer for generation tasks. Every mode's answer is kept too (``by_mode``), so
the modes can be compared on the same variants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sago_fast.answers.free_answers import FreeAnswer, answer_generations_prefilled
from sago_fast.answers.multiple_choice import (
    ANSWER_MODES,
    DEFAULT_ANSWER_MODE,
    OptionAnswer,
    answer_modes_prefilled,
    check_answer_mode,
)
from sago_fast.answers.prompting import ModelPrompts, PromptFormat, model_prompts
from sago_fast.runtime.decode import GenerationSettings
from sago_fast.types import Example, ProbeResult, Variant

if TYPE_CHECKING:
    from sago_fast.answers.protocol import LanguageModel


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
    answer for option variants, {} for generation variants; probe: the prefill of every prompt (pooled
    hidden states, next-token distribution), in variant order; tokens_processed: tokens through the graph;
    texts: the text the model read for each variant (chat markup and system text included)."""

    primary: list[AnyAnswer]
    by_mode: list[dict[str, OptionAnswer]]
    probe: ProbeResult
    tokens_processed: int
    texts: tuple[str, ...] = ()


def answer_unit(
    model: LanguageModel,
    examples: Sequence[Example],
    variants: Sequence[Variant],
    prompts: ModelPrompts,
    token_ids: Sequence[Sequence[int]],
    settings: AnswerSettings,
    modes: Sequence[str] = ANSWER_MODES,
) -> UnitAnswers:
    """Probe and answer every variant with one prefill per prompt: options and labels are scored on its
    cache, generations continue from it. ``token_ids`` belong to ``prompts``. modes: the answer modes
    computed (the run's mode always is)."""
    modes = tuple(dict.fromkeys([*modes, settings.answer_mode]))
    by_id = {e.example_id: e for e in examples}
    groups = (
        [i for i, v in enumerate(variants) if by_id[v.example_id].has_options],
        [i for i, v in enumerate(variants) if not by_id[v.example_id].has_options],
    )
    primary: list[Any] = [None] * len(variants)
    by_mode: list[dict[str, OptionAnswer]] = [{} for _ in variants]
    parts: list[tuple[list[int], ProbeResult]] = []
    processed = 0
    for index, rows in enumerate(groups):
        if not rows:
            continue
        sub_variants = [variants[i] for i in rows]
        sub_prompts = prompts.subset(rows)
        sub_ids = [token_ids[i] for i in rows]
        if index == 0:  # multiple choice and pairwise: every mode's options and labels
            chosen, prefill = answer_modes_prefilled(
                model, examples, sub_variants, sub_prompts, sub_ids, modes
            )
            for i, answers in zip(rows, chosen, strict=True):
                primary[i] = answers[settings.answer_mode]
                by_mode[i] = answers
        else:  # generation tasks: references scored on the cache, greedy decoding from it
            generated, prefill = answer_generations_prefilled(
                model, examples, sub_variants, settings.generation, sub_prompts, sub_ids
            )
            for i, answer in zip(rows, generated, strict=True):
                primary[i] = answer
        parts.append((rows, prefill.probe))
        processed += prefill.tokens_processed
    return UnitAnswers(primary, by_mode, ProbeResult.in_order(parts, len(variants)), processed, prompts.texts)


def answer_all(
    model: LanguageModel,
    examples: Sequence[Example],
    variants: Sequence[Variant],
    token_ids: Sequence[Sequence[int]],
    generation: GenerationSettings,
) -> list[AnyAnswer]:
    """``cloze`` option answers or greedy generations of variants on their plain prompts, in order."""
    prompts = ModelPrompts.plain(variants).with_heads(
        model.tokenizer, [v.head_chars for v in variants], token_ids
    )
    settings = AnswerSettings(generation=generation)
    return answer_unit(model, examples, variants, prompts, token_ids, settings, modes=("cloze",)).primary


def answer_chunk(
    model: LanguageModel,
    examples: Sequence[Example],
    variants: Sequence[Variant],
    settings: AnswerSettings,
    replicate: bool = True,
) -> tuple[UnitAnswers, UnitAnswers | None]:
    """Both passes over one chunk's variants, the prompts rendered and tokenized once: every variant in
    planned batches, then the canonical variants again one prompt per call (the replicate pass: another
    batch composition, no padding; what it gives against the first is the noise floor the statistics
    compare instability with). ``replicate`` False: the first pass alone (None for the second), for a
    chunk of canonical prompts that no instability is measured on."""
    from sago_fast.runtime.batching import BatchPolicy

    prompts = model_prompts(model.tokenizer, variants, settings.prompt_format)
    token_ids = prompts.token_ids(model.tokenizer)
    prompts = prompts.with_heads(model.tokenizer, [v.head_chars for v in variants], token_ids)
    canonical = [i for i, v in enumerate(variants) if v.is_canonical]
    alone = model.configured(
        batch_policy=BatchPolicy(token_budget=model.batch_policy.token_budget, max_batch=1)
    )
    passes = ((list(range(len(variants))), model), (canonical, alone))  # every variant batched; the canonical
    answered = []  # ones again, one prompt per call
    for rows, runs in passes[: 2 if replicate else 1]:
        subset = prompts.subset(rows)
        ids = [token_ids[i] for i in rows]
        answered.append(answer_unit(runs, examples, [variants[i] for i in rows], subset, ids, settings))
    return answered[0], answered[1] if replicate else None
