"""One chunk of a unit: answer its variants and score them.

For each chunk, once :func:`~sago_fast.answers.answering.answer_chunk` has answered its variants (one
prefill per prompt) and re-run its canonical prompts alone (the replicate pass), :func:`chunk_records`
runs the registered scorers: item scorers per example,
layer scorers per activation block, and each dataset scorer's ``partial``; the result is the chunk's
records (:class:`~sago_fast.units.unit_records.ChunkRecords`), its next-token distributions and hidden states
dropped, so memory follows the chunk, never the dataset. When every chunk is in, :func:`finish_unit`
combines the dataset scorers' partials. :func:`~sago_fast.units.driver.drive_unit` calls both.

The chunk size comes from a memory budget (:class:`StreamSettings`): a variant costs its float32
next-token log-probs (``vocab × 4`` bytes) and its pooled hidden states (:func:`variant_bytes`); float64
distributions are made one example at a time. Chunks hold whole examples, in dataset order,
so a resumed unit chunks its remaining examples exactly as an uninterrupted run does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from sago_fast.answers.answering import AnyAnswer, UnitAnswers
from sago_fast.answers.free_answers import FreeAnswer
from sago_fast.answers.multiple_choice import OptionAnswer
from sago_fast.axes import DATASET_SCORERS, LAYER_SCORERS, ExampleView, scorers_for
from sago_fast.axes.activation import KNN_K, NEIGHBOUR_BLOCK, POOLINGS
from sago_fast.axes.catalogue import check_metrics, check_written, metric
from sago_fast.axes.levels import (
    DRAWN,
    MIN_LAYOUT_EXAMPLES,
    ActivationBlock,
    ChunkView,
    Partial,
    UnitContext,
    variant_layout,
)
from sago_fast.axes.scored import ExampleOutputs, ItemScore, LayerScores, ScoredRows
from sago_fast.types import Example, Variant
from sago_fast.units.stream_settings import StreamSettings
from sago_fast.units.unit_records import ChunkRecords, ModelFacts, mode_answer_records, output_records

if TYPE_CHECKING:
    pass

ITEM_POOLING = "mean"  # the pooling whose layer-mean scores also go to item_scores


# -- sizes ------------------------------------------------------------------------------------------------
ROW_BYTES = 48 * 1024  # a variant's answers and rows as Python objects (~40 kB measured with tracemalloc)


def variant_bytes(vocab_size: int, n_layers: int, d_model: int) -> int:
    """Bytes one variant takes while its chunk is answered, scored and written: its float32 next-token
    log-probs, its pooled hidden states with the activation blocks' copies of them, and its answers and
    rows (an example's float64 distributions are made one example at a time)."""
    return vocab_size * 4 + (n_layers + 1) * d_model * 4 * len(POOLINGS) * 3 + ROW_BYTES


def example_activation_bytes(n_layers: int, d_model: int, n_variants: int) -> int:
    """Bytes the neighbourhood metrics keep of one example's activations (both poolings, float32)."""
    return (n_layers + 1) * d_model * 4 * len(POOLINGS) * n_variants


def examples_in_order(variants: Sequence[Variant]) -> dict[str, list[int]]:
    """example id -> its variant rows, in the order the examples first appear."""
    rows: dict[str, list[int]] = defaultdict(list)
    for index, variant in enumerate(variants):
        rows[variant.example_id].append(index)
    return rows


def plan_chunks(
    variants: Sequence[Variant], budget_bytes: int, per_variant: int, done: frozenset[str] = frozenset()
) -> list[list[str]]:
    """Example ids per chunk: whole examples in order, as many variants as ``budget_bytes`` holds (at least
    one example). Examples in ``done`` are left out; the chunks after them are those an uninterrupted run
    makes, as long as ``done`` is a prefix of whole chunks."""
    limit = max(1, budget_bytes // max(per_variant, 1))
    chunks: list[list[str]] = []
    current: list[str] = []
    size = 0
    for example_id, rows in examples_in_order(variants).items():
        if current and size + len(rows) > limit:
            chunks.append(current)
            current, size = [], 0
        current.append(example_id)
        size += len(rows)
    if current:
        chunks.append(current)
    return [[e for e in chunk if e not in done] for chunk in chunks if not set(chunk) <= done]


def sample_size(per_example_bytes: int, budget_bytes: int) -> int:
    """The most examples whose activations (``per_example_bytes`` each) fit in ``budget_bytes`` beside the
    finish's working set: the cosine distances among the kept examples and their temporaries (up to six
    (m, m) float64 arrays at once) and a block of sorted distances; at least KNN_K + 2."""
    a, b, c = 48.0, float(per_example_bytes + 16 * NEIGHBOUR_BLOCK), -float(budget_bytes)
    m = int((-b + np.sqrt(b * b - 4 * a * c)) / (2 * a))  # 48 m² + b m - budget <= 0
    return max(m, KNN_K + 2)


def seeded_sample(example_ids: Sequence[str], size: int, seed: int) -> frozenset[str] | None:
    """``size`` examples drawn uniformly without replacement (seeded), or None when all fit. The draw
    depends on the ids and the seed only, never on how the unit is chunked or resumed."""
    if size >= len(example_ids):
        return None
    order = np.random.default_rng(seed).permutation(len(example_ids))
    return frozenset(example_ids[i] for i in order[:size])


def unit_context(
    variants: Sequence[Variant], stream: StreamSettings, n_layers: int, d_model: int
) -> UnitContext:
    rows = examples_in_order(variants)
    layouts: dict[tuple[str, ...], int] = defaultdict(int)
    for example_rows in rows.values():
        layouts[variant_layout([variants[r] for r in example_rows])] += 1
    widest = max((len(r) for r in rows.values()), default=1)
    size = sample_size(example_activation_bytes(n_layers, d_model, widest), stream.sample_bytes)
    return UnitContext(
        n_examples=len(rows),
        seed=stream.seed,
        scored_layouts=frozenset(k for k, n in layouts.items() if n >= MIN_LAYOUT_EXAMPLES),
        sample=seeded_sample(list(rows), size, stream.seed),
    )


def model_context(model: ModelFacts, variants: Sequence[Variant], stream: StreamSettings) -> UnitContext:
    return unit_context(variants, stream, model.n_layers, model.d_model)


def model_variant_bytes(model: ModelFacts) -> int:
    return variant_bytes(model.vocab_size, model.n_layers, model.d_model)


# -- one chunk -----------------------------------------------------------------------------------------------
def answer_confidence(answer: AnyAnswer) -> float:
    """The model's confidence in its own answer: top option probability, or P(generated sequence)."""
    if isinstance(answer, OptionAnswer):
        return float(np.exp(answer.option_logprobs).max())
    return float(np.exp(answer.generation.logprob))


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
        "inclusion": np.array([v.inclusion for v in variants]),
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


def item_scores(
    example: Example, variants: Sequence[Variant], answers: Sequence[AnyAnswer], next_token: np.ndarray
) -> tuple[ExampleOutputs, list[ItemScore]]:
    """Every registered item scorer of the example's task type, on its variants (canonical first).
    next_token: (V, vocab) float64 next-token distributions of the variants."""
    outputs = example_outputs(example, variants, answers)
    families: list[str | None] = [
        None,
        *sorted({v.family for v in variants if v.meaning_preserving} - {"canonical"}),
    ]
    free = [a for a in answers if isinstance(a, FreeAnswer)]
    view = ExampleView(
        outputs,
        families,
        next_token,
        p_gold=np.array([a.p_gold for a in free]) if free else None,
        texts=[a.text_token_ids for a in free] if free else None,
        prompts=[v.prompt for v in variants],
    )
    scores: list[ItemScore] = []
    for scorer in scorers_for(example.task_type):
        scores += check_written(scorer.axis, scorer.score(view))
    return outputs, scores


def activation_blocks(
    variants: Sequence[Variant], rows_of: Mapping[str, list[int]], answers: UnitAnswers, alone: UnitAnswers
) -> list[ActivationBlock]:
    """The chunk's pooled hidden states grouped by variant layout, one block per layout and pooling.
    ``alone`` holds the canonical variants re-run alone, one per example in ``rows_of`` order."""
    layouts: dict[tuple[str, ...], list[int]] = defaultdict(list)  # layout -> example positions
    example_ids = list(rows_of)
    for position, example_id in enumerate(example_ids):
        layouts[variant_layout([variants[r] for r in rows_of[example_id]])].append(position)
    first = {"last": answers.probe.hidden_last, "mean": answers.probe.hidden_mean}
    again = {"last": alone.probe.hidden_last, "mean": alone.probe.hidden_mean}
    blocks = []
    for layout, positions in layouts.items():
        grid = np.array([rows_of[example_ids[p]] for p in positions])  # (E, V) variant rows
        preserving = np.array([variants[r].meaning_preserving for r in grid[0]])
        names = np.array([[variants[r].family for r in row] for row in grid])  # (E, V)
        inclusion = np.array([[variants[r].inclusion for r in row] for row in grid])  # (E, V)
        sampled = DRAWN in layout
        for pooling in POOLINGS:
            blocks.append(
                ActivationBlock(
                    layout=layout,
                    preserving=preserving,
                    families=(None, *sorted(set(names.ravel()) - {"canonical"})),
                    example_ids=tuple(example_ids[p] for p in positions),
                    pooling=pooling,
                    hidden=first[pooling][:, grid],  # (L+1, E, V, d)
                    replicate=again[pooling][:, positions],  # (L+1, E, d)
                    family_grid=names if sampled else None,
                    inclusion=inclusion if sampled else None,
                )
            )
    return blocks


def layer_item_scores(layers: Sequence[LayerScores]) -> list[ItemScore]:
    """item_scores rows of layer-wise metrics the catalogue also lists in ``item_scores``: each example's
    value averaged over layers (NaN layers left out), at the item pooling, under the metric's own axis."""
    groups: dict[tuple[str, str, str | None], list[float]] = defaultdict(list)
    for block in layers:
        if block.pooling != ITEM_POOLING:
            continue
        averaged = {name for name in set(block.metric) if "item_scores" in metric(name).tables}
        for e, name, family, value in zip(
            block.example_id, block.metric, block.family, block.value, strict=True
        ):
            if name in averaged:
                groups[(e, name, family)].append(float(value))
    out = []
    for (e, name, family), values in groups.items():
        finite = np.isfinite(values).any()
        value = float(np.nanmean(values)) if finite else float("nan")
        out.append(ItemScore(e, metric(name).axis, name, family, value))
    return out


def score_chunk(
    context: UnitContext,
    examples: Mapping[str, Example],
    variants: Sequence[Variant],
    answers: UnitAnswers,
    alone: UnitAnswers | None,
) -> tuple[ScoredRows, dict[str, Partial], tuple[bool, ...]]:
    """Item and layer scores of one chunk, its dataset scorers' partials, and whether each example's
    canonical variant was answered correctly (in example order). Without the replicate pass (``alone``
    None: canonical prompts alone, no instability measured) the chunk has no activation blocks."""
    rows_of = examples_in_order(variants)
    scored = ScoredRows()
    outputs = []
    for example_id, rows in rows_of.items():
        next_token = np.exp(answers.probe.next_logprobs[rows].astype(np.float64))  # (V, vocab), one example
        next_token /= next_token.sum(axis=1, keepdims=True)
        example_outputs_, scores = item_scores(
            examples[example_id], [variants[r] for r in rows], [answers.primary[r] for r in rows], next_token
        )
        outputs.append(example_outputs_)
        scored.items += scores
    blocks = [] if alone is None else activation_blocks(variants, rows_of, answers, alone)
    for name in LAYER_SCORERS.names():
        scorer = LAYER_SCORERS.get(name)
        for block in blocks:
            written = scorer.score(block, context)
            check_metrics(scorer.axis, {m for layer in written for m in layer.metric})
            scored.layers += written
    scored.items += layer_item_scores(scored.layers)
    view = ChunkView(
        context=context,
        examples=outputs,
        confidence=np.array([answer_confidence(a) for a in answers.primary]),
        correct=np.array([a.correct for a in answers.primary], dtype=bool),
        family=np.array([v.family for v in variants]),
        meaning_preserving=np.array([v.meaning_preserving for v in variants], dtype=bool),
        blocks=blocks,
    )
    partials = {name: DATASET_SCORERS.get(name).partial(view) for name in DATASET_SCORERS.names()}
    return scored, partials, tuple(bool(o.correct[0]) for o in outputs)


def prepare_unit(
    model: ModelFacts, variants: Sequence[Variant], stream: StreamSettings, done: frozenset[str] = frozenset()
) -> tuple[UnitContext, list[list[Variant]]]:
    """What a unit needs before its first chunk: the variants of each chunk still to do (:func:`plan_chunks`
    at the model's bytes per variant; examples in ``done`` left out) and the scorers' context."""
    rows_of = examples_in_order(variants)
    planned = plan_chunks(variants, stream.chunk_bytes, model_variant_bytes(model), done)
    chunks = [[variants[r] for e in chunk_ids for r in rows_of[e]] for chunk_ids in planned]
    return model_context(model, variants, stream), chunks


def chunk_records(
    context: UnitContext,
    examples: Mapping[str, Example],
    variants: Sequence[Variant],
    answers: UnitAnswers,
    alone: UnitAnswers | None,
    tokenizer: Any,
    index: int,
) -> ChunkRecords:
    """One answered chunk (whole examples, in order; ``alone``: its canonical prompts re-run alone, the
    replicate pass, or None without one) scored, as records: the probe arrays are not kept."""
    canonical = [v for v in variants if v.is_canonical]
    scored, partials, correct = score_chunk(context, examples, variants, answers, alone)
    outputs = output_records(tokenizer, examples, variants, answers, replicate=0)
    modes = mode_answer_records(variants, answers, replicate=0)
    if alone is not None:
        outputs += output_records(tokenizer, examples, canonical, alone, replicate=1)
        modes += mode_answer_records(canonical, alone, replicate=1)
    chunk_examples = tuple(examples[e] for e in examples_in_order(variants))
    return ChunkRecords(
        index, chunk_examples, tuple(variants), tuple(outputs), tuple(modes), scored, partials, correct
    )


def finish_unit(context: UnitContext, partials: Sequence[Mapping[str, Partial]]) -> ScoredRows:
    """The rows of every dataset scorer from every chunk's partials (in chunk order), plus the layer means
    of the layer-wise metrics they write."""
    scored = ScoredRows()
    for name in DATASET_SCORERS.names():
        scorer = DATASET_SCORERS.get(name)
        written = scorer.finish([p.get(name, {}) for p in partials], context)
        check_metrics(
            scorer.axis,
            {s.metric for s in written.items}
            | {m for layer in written.layers for m in layer.metric}
            | {s.metric for s in written.datasets},
        )
        scored.extend(written)
    scored.items += layer_item_scores(scored.layers)
    return scored
