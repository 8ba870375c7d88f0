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

import numpy as np

from sago_fast.errors import InputError
from sago_fast.runtime.free_answers import FreeAnswer, answer_generations_prefilled
from sago_fast.runtime.generate import GenerationSettings
from sago_fast.runtime.options import (
    ANSWER_MODES,
    DEFAULT_ANSWER_MODE,
    OptionAnswer,
    answer_modes_prefilled,
    check_answer_mode,
)
from sago_fast.runtime.prompting import ModelPrompts, PromptFormat, model_prompts
from sago_fast.types import Dataset, Example, ProbeResult, Variant

if TYPE_CHECKING:
    from sago_fast.runtime.protocol import LanguageModel


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
    hidden states, next-token distribution), in variant order; tokens_processed: tokens through the graph."""

    primary: list[AnyAnswer]
    by_mode: list[dict[str, OptionAnswer]]
    probe: ProbeResult
    tokens_processed: int


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
        sub_prompts = ModelPrompts(tuple(prompts.texts[i] for i in rows), prompts.chat)
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
    return UnitAnswers(primary, by_mode, _merge_probes(parts, len(variants)), processed)


def _merge_probes(parts: list[tuple[list[int], ProbeResult]], n: int) -> ProbeResult:
    """One ProbeResult in variant order from the probes of disjoint row groups (a single group already in
    order is returned as is: no copy of its (n, vocab) arrays)."""
    if len(parts) == 1 and parts[0][0] == list(range(n)):
        return parts[0][1]
    first = parts[0][1]
    hidden_last = np.empty((first.hidden_last.shape[0], n, first.hidden_last.shape[2]), dtype=np.float32)
    hidden_mean = np.empty_like(hidden_last)
    next_logprobs = np.empty((n, first.next_logprobs.shape[1]), dtype=np.float32)
    n_tokens = np.empty(n, dtype=np.int64)
    for rows, probe in parts:
        hidden_last[:, rows] = probe.hidden_last
        hidden_mean[:, rows] = probe.hidden_mean
        next_logprobs[rows] = probe.next_logprobs
        n_tokens[rows] = probe.n_tokens
    return ProbeResult(hidden_last, hidden_mean, next_logprobs, n_tokens)


def answer_all(
    model: LanguageModel,
    examples: Sequence[Example],
    variants: Sequence[Variant],
    token_ids: Sequence[Sequence[int]],
    generation: GenerationSettings,
) -> list[AnyAnswer]:
    """``cloze`` option answers or greedy generations of variants on their plain prompts, in order."""
    prompts = ModelPrompts(tuple(v.prompt for v in variants), chat=False)
    settings = AnswerSettings(generation=generation)
    return answer_unit(model, examples, variants, prompts, token_ids, settings, modes=("cloze",)).primary


def answer_chunk(
    model: LanguageModel, examples: Sequence[Example], variants: Sequence[Variant], settings: AnswerSettings
) -> tuple[UnitAnswers, UnitAnswers]:
    """Both passes over one chunk's variants, the prompts rendered and tokenized once: every variant in
    planned batches, then the canonical variants again one prompt per call (the replicate pass: another
    batch composition, no padding; what it gives against the first is the noise floor the statistics
    compare instability with)."""
    from sago_fast.runtime.batching import BatchPolicy

    prompts = model_prompts(model.tokenizer, variants, settings.prompt_format)
    token_ids = prompts.token_ids(model.tokenizer)
    answers = answer_unit(model, examples, variants, prompts, token_ids, settings)
    rows = [i for i, v in enumerate(variants) if v.is_canonical]
    again = ModelPrompts(tuple(prompts.texts[i] for i in rows), prompts.chat)
    saved = model.batch_policy
    model.batch_policy = BatchPolicy(token_budget=saved.token_budget, max_batch=1)
    try:
        alone = answer_unit(
            model, examples, [variants[i] for i in rows], again, [token_ids[i] for i in rows], settings
        )
    finally:
        model.batch_policy = saved
    return answers, alone


def check_prompts_fit(
    model: LanguageModel,
    data: Dataset,
    variants: Sequence[Variant],
    settings: AnswerSettings,
    batch: int = 4096,
) -> None:
    """Every variant's prompt plus what is appended to it (the longest option, or the generated tokens and
    the longest reference) must fit the model's positions; characters bound tokens from above. Prompts
    are tokenized ``batch`` at a time and only their lengths kept."""
    limit = model.max_positions
    if limit is None:
        return
    examples = {e.example_id: e for e in data.examples}
    generation = settings.generation
    for start in range(0, len(variants), batch):
        part = variants[start : start + batch]
        token_ids = model_prompts(model.tokenizer, part, settings.prompt_format).token_ids(model.tokenizer)
        for variant, ids in zip(part, token_ids, strict=True):
            example = examples[variant.example_id]
            if example.has_options:
                extra = max(len(o) for o in example.options)
            else:
                extra = max(generation.max_new_tokens, *(len(a) + 1 for a in example.answers))
            if len(ids) + extra > limit:
                raise InputError(
                    f"dataset {data.name!r}: variant {variant.variant_id} needs about {len(ids) + extra} tokens, "
                    f"more than the model's {limit} positions (drop long families such as fewshot_order, lower "
                    "--max-new-tokens, or use a model with a longer context)"
                )
