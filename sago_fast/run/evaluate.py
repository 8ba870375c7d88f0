"""One unit of work: one model on one dataset's variants → the rows of every results table."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sago_fast.axes.activation import activation_scores
from sago_fast.axes.confidence import confidence_scores, expected_calibration_error, gold_margin
from sago_fast.axes.generation import generation_scores
from sago_fast.axes.mirroring import mirroring_scores
from sago_fast.axes.records import ExampleOutputs, ItemScore
from sago_fast.datasets.resolve import Dataset
from sago_fast.errors import InputError
from sago_fast.runtime.options import answer_variants
from sago_fast.types import Variant

POOLINGS = ("last", "mean")
ITEM_POOLING = "mean"  # the pooling whose layer-mean scores also go to item_scores


@dataclass
class UnitTables:
    """Column dicts per table, ready for ``Store.insert``."""

    outputs: dict[str, Any] = field(default_factory=dict)
    item_scores: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    layer_scores: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    dataset_scores: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    accuracy: float = float("nan")  # canonical-variant accuracy


def check_supported(data: Dataset) -> None:
    generation = [e.example_id for e in data.examples if not e.has_options]
    if generation:
        raise InputError(
            f"dataset {data.name!r}: {len(generation)} generation example(s) (e.g. {generation[0]!r}); "
            "`sago run` scores multiple-choice and pairwise tasks so far (greedy generation is not built yet)"
        )


def evaluate_unit(model: Any, data: Dataset, variants: Sequence[Variant]) -> UnitTables:
    """Probe and answer every variant, then compute the four axes for every example."""
    check_supported(data)
    examples = {e.example_id: e for e in data.examples}
    token_ids = model.tokenizer([v.prompt for v in variants], add_special_tokens=True)["input_ids"]
    limit = model.max_positions
    # + the longest option: scoring appends it to the prompt
    longest_option = max(len(o) for e in data.examples for o in e.options)
    for variant, ids in zip(variants, token_ids, strict=True):
        if limit is not None and len(ids) + longest_option > limit:
            raise InputError(
                f"dataset {data.name!r}: variant {variant.variant_id} needs about {len(ids) + longest_option} tokens, "
                f"more than the model's {limit} positions (drop long families such as fewshot_order, or use a "
                "model with a longer context)"
            )
    probe = model.probe_ids(token_ids)  # hidden (L+1, Nv, d), next_logprobs (Nv, vocab)
    answers = answer_variants(model, data.examples, variants)
    tables = UnitTables()
    option_probs = [np.exp(a.option_logprobs) for a in answers]
    tables.outputs = output_columns(model, examples, variants, answers, probe, replicate=0)

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
        outputs = ExampleOutputs(
            example_id=example_id,
            gold=int(example.answer_index),  # type: ignore[arg-type]
            answer=np.array([answers[r].answer_index for r in rows]),
            correct=np.array([answers[r].correct for r in rows]),
            option_probs=np.stack([option_probs[r] for r in rows]),
            families=tuple(v.family for v in vs),
            meaning_preserving=np.array([v.meaning_preserving for v in vs]),
            option_order=np.array([v.option_order for v in vs]),
            hint_index=np.array([-1 if v.hint_index is None else v.hint_index for v in vs]),
        )
        canonical_correct.append(bool(outputs.correct[0]))
        families: list[str | None] = [
            None,
            *sorted({v.family for v in vs if v.meaning_preserving} - {"canonical"}),
        ]
        scores: list[ItemScore] = []
        scores += generation_scores(outputs, families)
        scores += confidence_scores(outputs, families, next_token_probs=next_token[rows])
        scores += mirroring_scores(outputs)
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

    _replicate(model, data, variants, probe, tables)

    confidence = np.array([p.max() for p in option_probs])
    correct = np.array([a.correct for a in answers])
    family_of = np.array([v.family for v in variants])
    eces = {}
    for family in sorted(set(family_of)):
        mask = family_of == family
        eces[family] = expected_calibration_error(confidence[mask], correct[mask])
        _dataset_row(tables, "confidence", "ece", family, None, None, eces[family])
    preserving_eces = [e for f, e in eces.items() if f != "wrong_hint"]
    _dataset_row(tables, "confidence", "ece_spread", None, None, None, float(np.ptp(preserving_eces)))
    return tables


def output_columns(
    model: Any,
    examples: dict[str, Any],
    variants: Sequence[Variant],
    answers: Sequence[Any],
    probe: Any,
    replicate: int,
) -> dict[str, Any]:
    """``outputs`` columns for variants answered (``answers``) and probed (``probe``) in one replicate."""
    n = len(variants)
    top = probe.next_logprobs.argmax(axis=1)  # (n,)
    return {
        "example_id": [v.example_id for v in variants],
        "variant_id": [v.variant_id for v in variants],
        "replicate": np.full(n, replicate, dtype=np.int32),
        "n_prompt_tokens": probe.n_tokens.astype(np.int32),
        "answer": [
            examples[v.example_id].options[a.answer_index] for v, a in zip(variants, answers, strict=True)
        ],
        "answer_index": [a.answer_index for a in answers],
        "correct": [a.correct for a in answers],
        "option_logprobs": [a.option_logprobs.tolist() for a in answers],
        "p_gold": [a.p_gold for a in answers],
        "entropy": [a.entropy for a in answers],
        "margin": [
            float(gold_margin(np.exp(a.option_logprobs)[None, :], examples[v.example_id].answer_index)[0])
            for v, a in zip(variants, answers, strict=True)
        ],
        "top_token": [model.tokenizer.decode([int(t)]) for t in top],
        "top_logprob": probe.next_logprobs[np.arange(n), top].astype(np.float64),
    }


def _replicate(
    model: Any, data: Dataset, variants: Sequence[Variant], probe: Any, tables: UnitTables
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
        again = model.probe([v.prompt for v in canonical])
        answers = answer_variants(model, data.examples, canonical)
    finally:
        model.batch_policy = saved
    examples = {e.example_id: e for e in data.examples}
    extra = output_columns(model, examples, canonical, answers, again, replicate=1)
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
    }


def params_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
