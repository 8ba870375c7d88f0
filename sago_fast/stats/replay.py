"""A sampled design replayed from a full-design run's stored outputs, without the model.

A full run has every cell of every item. Any assignment of ``--design sampled --families-per-item m`` is a
subset of those cells, so replaying it means drawing the cells (:func:`~sago_fast.variants.design.
drawn_families`, the package's own draw, one seed per assignment), keeping those variants' stored answers
and option probabilities, and scoring each item with the axes' own scorers, weighted by the design's
inclusion probabilities. Over many assignments this shows what a sampled run would have said: whether each
model-level figure is unbiased for the full design's value on the same items (the mean over assignments
against that value), whether its 95% interval covers that value, and how wide the interval is.

Replayable: the item metrics computed from answers and option probabilities (generation consistency,
confidence, position mirroring). Activation metrics need hidden states, which a run does not store; their
estimator is checked by enumeration in the unit tests.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sago_fast.axes.confidence import confidence_scores
from sago_fast.axes.generation import generation_scores
from sago_fast.axes.mirroring import mirroring_scores
from sago_fast.axes.scored import ExampleOutputs, ItemScore
from sago_fast.stats.methods import mean_inference
from sago_fast.stats.settings import StatsConfig
from sago_fast.store.store import Store
from sago_fast.variants.design import drawn_families

REPLAYED: tuple[tuple[str, str | None], ...] = (
    ("answer_disagreement", None),
    ("correctness_flip", None),
    ("flip_rate", None),
    ("option_js", None),
    ("margin_flip", None),
    ("p_gold_diff", None),
    ("p_gold_sd", None),
    ("position_mirroring", "option_permutation"),
)  # (metric, family): the model-level figures a replay estimates


@dataclass(frozen=True)
class StoredItem:
    """One item's outputs under the full design (canonical first), its meaning-preserving families and
    each variant's prompt tokens (what it costs to run)."""

    outputs: ExampleOutputs
    families: tuple[str, ...]
    tokens: np.ndarray


def stored_items(store: Store, run_id: str, model_id: str, dataset_id: str) -> list[StoredItem]:
    """The multiple-choice items of one full-design unit, from ``outputs`` (the first replicate) and
    ``variants``, in the dataset's variant order."""
    _, rows = store.query(
        """
        SELECT o.example_id, v.family, v.meaning_preserving, v.option_order, o.answer_index, o.correct,
               o.option_logprobs, e.answer_index AS gold, o.n_prompt_tokens
        FROM outputs o
        JOIN variants v ON v.dataset_id = o.dataset_id AND v.variant_id = o.variant_id
        JOIN examples e ON e.dataset_id = o.dataset_id AND e.example_id = o.example_id
        WHERE o.run_id = $run AND o.model_id = $model AND o.dataset_id = $dataset AND o.replicate = 0
              AND o.option_logprobs IS NOT NULL
        ORDER BY o.example_id, v.is_canonical DESC, v.family, v.variant_id
        """,
        {"run": run_id, "model": model_id, "dataset": dataset_id},
    )
    by_example: dict[str, list[tuple]] = {}
    for row in rows:
        by_example.setdefault(row[0], []).append(row)
    items = []
    for example_id, variants in by_example.items():
        names = tuple(r[1] for r in variants)
        outputs = ExampleOutputs(
            example_id,
            gold=int(variants[0][7]),
            answer=np.array([r[4] for r in variants]),
            correct=np.array([bool(r[5]) for r in variants]),
            option_probs=np.exp(np.array([r[6] for r in variants], dtype=np.float64)),
            families=names,
            meaning_preserving=np.array([bool(r[2]) for r in variants]),
            option_order=np.array([r[3] for r in variants], dtype=np.int64),
            hint_index=np.full(len(variants), -1),
        )
        preserving = tuple(
            dict.fromkeys(n for n, r in zip(names, variants, strict=True) if r[2] and n != "canonical")
        )
        tokens = np.array([r[8] or 0 for r in variants], dtype=np.float64)
        items.append(StoredItem(outputs, preserving, tokens))
    return items


def item_values(ex: ExampleOutputs) -> dict[tuple[str, str | None], float]:
    """(metric, family) -> the item's score, for the replayed metrics."""
    scores: list[ItemScore] = (
        generation_scores(ex, [None]) + confidence_scores(ex, [None]) + mirroring_scores(ex)
    )
    wanted = set(REPLAYED)
    return {(s.metric, s.family): s.value for s in scores if (s.metric, s.family) in wanted}


def sampled_outputs(item: StoredItem, drawn: tuple[str, ...], probability: float) -> ExampleOutputs:
    """The item's outputs restricted to its canonical, its non-preserving and its ``drawn`` families."""
    keep = kept_rows(item, drawn)
    families = item.outputs.families
    return item.outputs.restricted_to(
        keep, np.array([probability if families[i] in drawn else 1.0 for i in keep])
    )


def kept_rows(item: StoredItem, drawn: tuple[str, ...]) -> list[int]:
    """The item's variants a sampled design renders: canonical, non-preserving and the ``drawn`` families."""
    ex = item.outputs
    return [
        i
        for i, family in enumerate(ex.families)
        if family == "canonical" or not ex.meaning_preserving[i] or family in drawn
    ]


@dataclass(frozen=True)
class Assignment:
    """One replayed assignment: per (metric, family), the estimate and its 95% interval, over the items
    that have a value; and the prompt tokens its cells cost (the replicate pass's canonical re-runs
    included)."""

    estimates: dict[tuple[str, str | None], tuple[float, float, float]]
    tokens: float = 0.0


def model_figures(
    values: Sequence[dict[tuple[str, str | None], float]], config: StatsConfig, tokens: float
) -> Assignment:
    """Each replayed metric's mean over items and its CI, as ``model_scores`` computes them."""
    out: dict[tuple[str, str | None], tuple[float, float, float]] = {}
    for key in REPLAYED:
        column = np.array([v[key] for v in values if key in v], dtype=np.float64)
        if len(column):
            result = mean_inference(column, config, stream=zlib.crc32(repr(key).encode()))
            out[key] = (result.estimate, result.low, result.high)
    return Assignment(out, tokens)


def full_figures(items: Sequence[StoredItem], config: StatsConfig) -> Assignment:
    """The full design's figures on these items (every cell)."""
    tokens = sum(float(item.tokens.sum() + item.tokens[0]) for item in items)
    return model_figures([item_values(item.outputs) for item in items], config, tokens)


ItemCache = dict[tuple[str, tuple[str, ...]], dict[tuple[str, str | None], float]]


def assignment_values(
    items: Sequence[StoredItem], m: int, seed: int, cache: ItemCache
) -> tuple[list[dict[tuple[str, str | None], float]], float]:
    """Each item's replayed scores (in ``items`` order) under one assignment of the sampled design with
    ``m`` families per item, drawn with ``seed``, and the prompt tokens its cells cost. ``cache``: item
    scores by (example, drawn families), shared by the assignments of one replay (an item has at most
    C(K, m) different draws)."""
    drawn = drawn_families({item.outputs.example_id: item.families for item in items}, m, seed)
    values, tokens = [], 0.0
    for item in items:
        families, probability = drawn[item.outputs.example_id]
        key = (item.outputs.example_id, families)
        if key not in cache:
            cache[key] = item_values(sampled_outputs(item, families, probability))
        values.append(cache[key])
        tokens += float(item.tokens[kept_rows(item, families)].sum() + item.tokens[0])
    return values, tokens


def replay_assignment(
    items: Sequence[StoredItem], m: int, seed: int, config: StatsConfig, cache: ItemCache | None = None
) -> Assignment:
    """One assignment's model-level figures (:func:`assignment_values`, then :func:`model_figures`)."""
    values, tokens = assignment_values(items, m, seed, {} if cache is None else cache)
    return model_figures(values, config, tokens)
