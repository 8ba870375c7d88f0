"""One unit of work: one model on one dataset's variants → the rows of every results table."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sago_fast.axes import ExampleView, scorers_for
from sago_fast.axes.activation import activation_scores
from sago_fast.axes.catalogue import check_written
from sago_fast.axes.confidence import calibration_by_family, gold_margin
from sago_fast.axes.records import ExampleOutputs, ItemScore
from sago_fast.datasets.resolve import Dataset
from sago_fast.errors import InputError
from sago_fast.runtime.answering import AnswerSettings, AnyAnswer, UnitAnswers, answer_unit
from sago_fast.runtime.free_answers import FreeAnswer
from sago_fast.runtime.generate import GenerationSettings
from sago_fast.runtime.options import OptionAnswer
from sago_fast.runtime.prompting import model_prompts
from sago_fast.types import Example, Variant

if TYPE_CHECKING:
    from sago_fast.runtime.protocol import LanguageModel


POOLINGS = ("last", "mean")
ITEM_POOLING = "mean"  # the pooling whose layer-mean scores also go to item_scores


@dataclass
class UnitTables:
    """Column dicts per table, ready for ``Store.insert``."""

    outputs: dict[str, Any] = field(default_factory=dict)
    mode_answers: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    item_scores: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    layer_scores: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    dataset_scores: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    accuracy: float = float("nan")  # canonical-variant accuracy


def check_fits(
    model: LanguageModel,
    data: Dataset,
    variants: Sequence[Variant],
    token_ids: Sequence[Sequence[int]],
    generation: GenerationSettings,
) -> None:
    """Every variant's prompt plus what is appended to it (the longest option, or the generated tokens and
    the longest reference) must fit the model's positions; characters bound tokens from above."""
    limit = model.max_positions
    if limit is None:
        return
    examples = {e.example_id: e for e in data.examples}
    for variant, ids in zip(variants, token_ids, strict=True):
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


def answer_confidence(answer: AnyAnswer) -> float:
    """The model's confidence in its own answer: top option probability, or P(generated sequence)."""
    if isinstance(answer, OptionAnswer):
        return float(np.exp(answer.option_logprobs).max())
    return float(np.exp(answer.generation.logprob))


def evaluate_unit(
    model: LanguageModel,
    data: Dataset,
    variants: Sequence[Variant],
    settings: AnswerSettings | GenerationSettings | None = None,
) -> UnitTables:
    """Probe and answer every variant, then compute the four axes for every example.

    settings: prompt format, answer mode and generation limits (a bare :class:`GenerationSettings`
    means plain prompts and ``cloze`` answers)."""
    if not isinstance(settings, AnswerSettings):
        settings = AnswerSettings(generation=settings or GenerationSettings())
    generation = settings.generation
    examples = {e.example_id: e for e in data.examples}
    prompts = model_prompts(model.tokenizer, variants, settings.prompt_format)
    token_ids = prompts.token_ids(model.tokenizer)
    check_fits(model, data, variants, token_ids, generation)
    unit_answers = answer_unit(model, data.examples, variants, prompts, token_ids, settings)
    probe = unit_answers.probe  # hidden (L+1, Nv, d), next_logprobs (Nv, vocab)
    answers = unit_answers.primary
    tables = UnitTables()
    tables.outputs = output_columns(model, examples, variants, unit_answers, probe, replicate=0)
    _mode_rows(tables, variants, unit_answers, replicate=0)

    rows_of: dict[str, list[int]] = defaultdict(list)
    for index, variant in enumerate(variants):
        rows_of[variant.example_id].append(index)
    next_token = np.exp(probe.next_logprobs.astype(np.float64))
    next_token /= next_token.sum(axis=1, keepdims=True)
    canonical_correct = []
    layouts: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for example_id, rows in rows_of.items():
        example = examples[example_id]
        vs = [variants[r] for r in rows]
        outputs = example_outputs(example, vs, [answers[r] for r in rows])
        canonical_correct.append(bool(outputs.correct[0]))
        families: list[str | None] = [
            None,
            *sorted({v.family for v in vs if v.meaning_preserving} - {"canonical"}),
        ]
        free = [a for a in (answers[r] for r in rows) if isinstance(a, FreeAnswer)]
        view = ExampleView(
            outputs,
            families,
            next_token[rows],
            p_gold=np.array([a.p_gold for a in free]) if free else None,
            texts=[a.text_token_ids for a in free] if free else None,
            prompts=[v.prompt for v in vs],
        )
        scores: list[ItemScore] = []
        for scorer in scorers_for(example.task_type):
            scores += check_written(scorer.axis, scorer.score(view))
        for s in scores:
            tables.item_scores["example_id"].append(s.example_id)
            tables.item_scores["axis"].append(s.axis)
            tables.item_scores["metric"].append(s.metric)
            tables.item_scores["family"].append(s.family)
            tables.item_scores["value"].append(s.value)
        layouts[outputs.families].append(example_id)
    tables.accuracy = float(np.mean(canonical_correct))

    hidden = {"last": probe.hidden_last, "mean": probe.hidden_mean}
    for layout, example_ids in layouts.items():
        if len(example_ids) < 3:
            continue
        grid = np.array([rows_of[e] for e in example_ids])  # (E, V) variant rows
        preserving = np.array([variants[r].meaning_preserving for r in grid[0]])
        fams: list[str | None] = [None, *sorted(set(layout) - {"canonical"})]
        for pooling in POOLINGS:
            H = hidden[pooling][:, grid]  # (L+1, E, V, d)
            layer_rows, dataset_rows = activation_scores(H, layout, preserving, fams)
            tables.layer_scores["example_id"] += [example_ids[i] for i in layer_rows.example_index]
            tables.layer_scores["layer"] += layer_rows.layer.tolist()
            tables.layer_scores["pooling"] += [pooling] * len(layer_rows.metric)
            tables.layer_scores["metric"] += layer_rows.metric
            tables.layer_scores["family"] += layer_rows.family
            tables.layer_scores["value"] += layer_rows.value.tolist()
            for layer, metric, family, value in dataset_rows:
                _dataset_row(tables, "activation", metric, family, layer, pooling, value)
            if pooling == ITEM_POOLING:
                _activation_items(tables, example_ids, layer_rows)

    _replicate(model, data, variants, probe, tables, settings)

    eces, spread = calibration_by_family(
        np.array([answer_confidence(a) for a in answers]),
        np.array([a.correct for a in answers]),
        [v.family for v in variants],
        np.array([v.meaning_preserving for v in variants]),
    )
    for family, ece in eces.items():
        _dataset_row(tables, "confidence", "ece", family, None, None, ece)
    _dataset_row(tables, "confidence", "ece_spread", None, None, None, spread)
    return tables


def example_outputs(
    example: Example, variants: Sequence[Variant], answers: Sequence[AnyAnswer]
) -> ExampleOutputs:
    """What the axes read for one example (canonical variant first). Generation tasks have no options:
    answers are answer keys and the option arrays are empty."""
    common: dict[str, Any] = {
        "example_id": example.example_id,
        "correct": np.array([a.correct for a in answers]),
        "families": tuple(v.family for v in variants),
        "meaning_preserving": np.array([v.meaning_preserving for v in variants]),
        "hint_index": np.array([-1 if v.hint_index is None else v.hint_index for v in variants]),
    }
    if example.has_options:
        return ExampleOutputs(
            gold=int(example.answer_index),  # type: ignore[arg-type]
            answer=np.array([a.answer_index for a in answers]),  # type: ignore[union-attr]
            option_probs=np.stack([np.exp(a.option_logprobs) for a in answers]),  # type: ignore[union-attr]
            option_order=np.array([v.option_order for v in variants]),
            **common,
        )
    n = len(variants)
    return ExampleOutputs(
        gold=-1,
        answer=np.array([a.key for a in answers], dtype=object),  # type: ignore[union-attr]
        option_probs=np.zeros((n, 0)),
        option_order=np.zeros((n, 0), dtype=np.int64),
        **common,
    )


def output_columns(
    model: LanguageModel,
    examples: dict[str, Any],
    variants: Sequence[Variant],
    unit_answers: UnitAnswers,
    probe: Any,
    replicate: int,
) -> dict[str, Any]:
    """``outputs`` columns for variants answered (``unit_answers``) and probed (``probe``) in one
    replicate.

    Multiple choice fills answer_index, option_logprobs, margin and answer_mode (the primary mode);
    generation fills generation (the text, cut at the stop string) and takes entropy from the first
    generated token's distribution."""
    answers = unit_answers.primary
    n = len(variants)
    top = probe.next_logprobs.argmax(axis=1)  # (n,)
    logp = probe.next_logprobs.astype(np.float64)
    next_entropy = -(np.exp(logp) * logp).sum(axis=1)  # (n,)
    columns: dict[str, list[Any]] = defaultdict(list)
    for row, (variant, answer) in enumerate(zip(variants, answers, strict=True)):
        example = examples[variant.example_id]
        if isinstance(answer, OptionAnswer):
            columns["answer"].append(example.options[answer.answer_index])
            columns["answer_index"].append(answer.answer_index)
            columns["option_logprobs"].append(answer.option_logprobs.tolist())
            columns["entropy"].append(answer.entropy)
            columns["margin"].append(
                float(gold_margin(np.exp(answer.option_logprobs)[None, :], example.answer_index)[0])
            )
            columns["generation"].append(None)
            columns["answer_mode"].append(answer.mode)
        else:
            columns["answer"].append(answer.answer)
            columns["answer_index"].append(None)
            columns["option_logprobs"].append(None)
            columns["entropy"].append(float(next_entropy[row]))
            columns["margin"].append(None)
            columns["generation"].append(answer.generation.text)
            columns["answer_mode"].append(None)
        columns["correct"].append(answer.correct)
        columns["p_gold"].append(answer.p_gold)
    return {
        "example_id": [v.example_id for v in variants],
        "variant_id": [v.variant_id for v in variants],
        "replicate": np.full(n, replicate, dtype=np.int32),
        "n_prompt_tokens": probe.n_tokens.astype(np.int32),
        **columns,
        "top_token": [model.tokenizer.decode([int(t)]) for t in top],
        "top_logprob": probe.next_logprobs[np.arange(n), top].astype(np.float64),
    }


def _replicate(
    model: LanguageModel,
    data: Dataset,
    variants: Sequence[Variant],
    probe: Any,
    tables: UnitTables,
    settings: AnswerSettings,
) -> None:
    """Replicate 1: canonical prompts re-run alone (other batch composition, no padding).

    Its outputs rows (replicate = 1) and per-layer ``replicate_distance`` (cosine distance between the two
    runs' canonical representations) are the noise floor the statistics compare instability with.
    """
    from sago_fast.kernels import distances_to_reference
    from sago_fast.runtime.batching import BatchPolicy

    rows = [i for i, v in enumerate(variants) if v.is_canonical]
    canonical = [variants[i] for i in rows]
    saved = model.batch_policy
    model.batch_policy = BatchPolicy(token_budget=saved.token_budget, max_batch=1)
    try:
        prompts = model_prompts(model.tokenizer, canonical, settings.prompt_format)
        token_ids = prompts.token_ids(model.tokenizer)
        answers = answer_unit(model, data.examples, canonical, prompts, token_ids, settings)
        again = answers.probe
    finally:
        model.batch_policy = saved
    examples = {e.example_id: e for e in data.examples}
    extra = output_columns(model, examples, canonical, answers, again, replicate=1)
    _mode_rows(tables, canonical, answers, replicate=1)
    for column, values in extra.items():
        base = tables.outputs[column]
        tables.outputs[column] = (
            np.concatenate([base, values]) if isinstance(base, np.ndarray) else [*base, *values]
        )
    for pooling, first, second in (
        ("last", probe.hidden_last[:, rows], again.hidden_last),
        ("mean", probe.hidden_mean[:, rows], again.hidden_mean),
    ):
        n_layers = first.shape[0]
        pair = np.stack([first, second], axis=2).reshape(n_layers * len(rows), 2, -1)  # (L*E, 2, d)
        dist = distances_to_reference(pair, "cosine", reference=0, check=False)[:, 1].reshape(
            n_layers, len(rows)
        )
        for layer in range(n_layers):
            tables.layer_scores["example_id"] += [v.example_id for v in canonical]
            tables.layer_scores["layer"] += [layer] * len(rows)
            tables.layer_scores["pooling"] += [pooling] * len(rows)
            tables.layer_scores["metric"] += ["replicate_distance"] * len(rows)
            tables.layer_scores["family"] += ["canonical"] * len(rows)
            tables.layer_scores["value"] += dist[layer].tolist()


def _mode_rows(
    tables: UnitTables, variants: Sequence[Variant], unit_answers: UnitAnswers, replicate: int
) -> None:
    """``mode_answers`` rows: every answer mode's answer of every option variant."""
    rows = tables.mode_answers
    for variant, answers in zip(variants, unit_answers.by_mode, strict=True):
        for mode, answer in answers.items():
            rows["example_id"].append(variant.example_id)
            rows["variant_id"].append(variant.variant_id)
            rows["replicate"].append(replicate)
            rows["answer_mode"].append(mode)
            rows["answer_index"].append(answer.answer_index)
            rows["correct"].append(answer.correct)
            rows["p_gold"].append(answer.p_gold)
            rows["option_scores"].append(answer.option_loglik.tolist())
            rows["option_logprobs"].append(answer.option_logprobs.tolist())


def _activation_items(tables: UnitTables, example_ids: list[str], layer_rows: Any) -> None:
    """item_scores rows for the activation axis: each layer-wise metric averaged over layers."""
    groups: dict[tuple[int, str, str | None], list[float]] = defaultdict(list)
    for e, metric, family, value in zip(
        layer_rows.example_index, layer_rows.metric, layer_rows.family, layer_rows.value, strict=True
    ):
        groups[(int(e), metric, family)].append(float(value))
    for (e, metric, family), values in groups.items():
        tables.item_scores["example_id"].append(example_ids[e])
        tables.item_scores["axis"].append("activation")
        tables.item_scores["metric"].append(metric)
        tables.item_scores["family"].append(family)
        tables.item_scores["value"].append(
            float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")
        )


def _dataset_row(
    tables: UnitTables,
    axis: str,
    metric: str,
    family: str | None,
    layer: int | None,
    pooling: str | None,
    value: float,
) -> None:
    row = tables.dataset_scores
    row["axis"].append(axis)
    row["metric"].append(metric)
    row["family"].append(family)
    row["layer"].append(layer)
    row["pooling"].append(pooling)
    row["value"].append(float(value))


def variant_rows(dataset_id: str, variants: Sequence[Variant]) -> dict[str, list[Any]]:
    return {
        "dataset_id": [dataset_id] * len(variants),
        "example_id": [v.example_id for v in variants],
        "variant_id": [v.variant_id for v in variants],
        "family": [v.family for v in variants],
        "params_json": [v.params for v in variants],
        "is_canonical": [v.is_canonical for v in variants],
        "meaning_preserving": [v.meaning_preserving for v in variants],
        "prompt": [v.prompt for v in variants],
        "option_order": [list(v.option_order) for v in variants],
        "option_labels": [list(v.option_labels) for v in variants],
        "system_prompt": [v.system_prompt for v in variants],
    }


def params_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
