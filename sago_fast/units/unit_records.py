"""What evaluating a unit produces, as typed records: one :class:`ChunkRecords` per answered chunk and a
:class:`UnitEnd` when the unit ends. The records carry everything the tables need (answers with their
margin, entropy and decoded top token, scores, partials, followed values) and nothing the tables do not
(no probe arrays), so they are small enough to cross a process boundary (Ray). Only
:mod:`sago_fast.units.rows` turns them into table rows, at the sink.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sago_fast.answers.multiple_choice import OptionAnswer
from sago_fast.axes.confidence import gold_margin
from sago_fast.axes.levels import Partial, UnitContext
from sago_fast.axes.scored import ScoredRows

if TYPE_CHECKING:
    from sago_fast.answers.answering import UnitAnswers
    from sago_fast.runtime.model import SagoModel
    from sago_fast.types import Example, Variant
    from sago_fast.units.sequential import ChunkValues, MetricBounds


@dataclass(frozen=True)
class OutputRecord:
    """One variant's answer in one replicate (0: the batched pass, 1: the canonical prompt re-run alone).

    Multiple choice fills answer_index, option_logprobs, margin (P(gold) minus the best other option) and
    answer_mode; generation fills generation (the text, cut at the stop string). entropy: of the chosen
    option distribution, or of the first generated token's; top_token / top_logprob: the next token the
    model ranks first after the prompt, decoded; prompt_tokens_cut: tokens cut from the prompt's left so
    that it fits the model (lm-eval's rule; 0: the whole prompt was read); prompt_read: the text the model
    read when it is not the variant's prompt itself (a chat template, a system prompt), else None."""

    example_id: str
    variant_id: str
    replicate: int
    n_prompt_tokens: int
    answer: str
    answer_index: int | None
    option_logprobs: list[float] | None
    entropy: float
    margin: float | None
    generation: str | None
    answer_mode: str | None
    correct: bool
    p_gold: float | None
    top_token: str
    top_logprob: float
    prompt_tokens_cut: int
    prompt_read: str | None = None


@dataclass(frozen=True)
class ModeAnswerRecord:
    """One answer mode's answer of one option variant in one replicate."""

    example_id: str
    variant_id: str
    replicate: int
    answer_mode: str
    answer_index: int
    correct: bool
    p_gold: float
    option_scores: list[float]
    option_logprobs: list[float]


def output_records(
    tokenizer: Any,
    examples: Mapping[str, Example],
    variants: Sequence[Variant],
    answers: UnitAnswers,
    replicate: int,
) -> list[OutputRecord]:
    """The records of ``variants`` answered in one replicate (``answers`` in variant order)."""
    probe = answers.probe
    top = probe.next_logprobs.argmax(axis=1)  # (n,)
    cut = probe.cut_tokens  # (n,)
    out = []
    for row, (variant, answer) in enumerate(zip(variants, answers.primary, strict=True)):
        example = examples[variant.example_id]
        if isinstance(answer, OptionAnswer):
            probs = np.exp(answer.option_logprobs)[None, :]  # (1, K)
            kind: dict[str, Any] = {
                "answer": example.options[answer.answer_index],
                "answer_index": answer.answer_index,
                "option_logprobs": answer.option_logprobs.tolist(),
                "entropy": answer.entropy,
                "margin": float(gold_margin(probs, example.answer_index)[0]),  # type: ignore[arg-type]
                "generation": None,
                "answer_mode": answer.mode,
            }
        else:
            logp = probe.next_logprobs[row].astype(np.float64)  # (vocab,): one row at a time
            kind = {
                "answer": answer.answer,
                "answer_index": None,
                "option_logprobs": None,
                "entropy": float(-(np.exp(logp) * logp).sum()),
                "margin": None,
                "generation": answer.generation.text,
                "answer_mode": None,
            }
        out.append(
            OutputRecord(
                example_id=variant.example_id,
                variant_id=variant.variant_id,
                replicate=replicate,
                n_prompt_tokens=int(probe.n_tokens[row]),
                correct=answer.correct,
                p_gold=answer.p_gold,
                top_token=tokenizer.decode([int(top[row])]),
                top_logprob=float(probe.next_logprobs[row, top[row]]),
                prompt_tokens_cut=int(cut[row]),
                prompt_read=_read(answers.texts, row, variant.prompt),
                **kind,
            )
        )
    return out


def _read(texts: Sequence[str], row: int, prompt: str) -> str | None:
    """The text the model read for ``row`` when it is not ``prompt`` itself."""
    return texts[row] if texts and texts[row] != prompt else None


def mode_answer_records(
    variants: Sequence[Variant], answers: UnitAnswers, replicate: int
) -> list[ModeAnswerRecord]:
    """Every answer mode's answer of every option variant (generation variants have none)."""
    return [
        ModeAnswerRecord(
            example_id=variant.example_id,
            variant_id=variant.variant_id,
            replicate=replicate,
            answer_mode=mode,
            answer_index=answer.answer_index,
            correct=answer.correct,
            p_gold=answer.p_gold,
            option_scores=answer.option_loglik.tolist(),
            option_logprobs=answer.option_logprobs.tolist(),
        )
        for variant, by_mode in zip(variants, answers.by_mode, strict=True)
        for mode, answer in by_mode.items()
    ]


@dataclass(frozen=True)
class ChunkRecords:
    """One answered and scored chunk of a unit.

    examples, variants: what it evaluated (in order); outputs, mode_answers: both replicates; scored: its
    item and layer scores; partials: its dataset scorers' partial states; canonical_correct: per example;
    followed / bounds: a sequential unit's followed values of the chunk and its confidence sequences after
    it (``n_visited`` examples so far); seconds: answering and scoring time."""

    index: int
    examples: tuple[Example, ...]
    variants: tuple[Variant, ...]
    outputs: tuple[OutputRecord, ...]
    mode_answers: tuple[ModeAnswerRecord, ...]
    scored: ScoredRows
    partials: dict[str, Partial]
    canonical_correct: tuple[bool, ...]
    seconds: float = 0.0
    followed: ChunkValues | None = None
    bounds: tuple[MetricBounds, ...] = ()
    n_visited: int = 0

    @property
    def example_ids(self) -> tuple[str, ...]:
        return tuple(e.example_id for e in self.examples)

    @property
    def n_variants(self) -> int:
        return len(self.variants)

    @property
    def n_canonical_correct(self) -> int:
        return sum(self.canonical_correct)


@dataclass(frozen=True)
class ModelFacts:
    """What the ``models`` and ``checkpoint_names`` rows say of a loaded model: its export manifest, its
    checkpoint, and every name under which the run met its content."""

    model_id: str
    checkpoint: Any  # sago_fast.checkpoints.resolve.Checkpoint
    manifest: Mapping[str, Any]
    aliases: tuple[Any, ...] = ()
    provider: str = ""

    @property
    def n_layers(self) -> int:
        return int(self.manifest["n_layers"])

    @property
    def d_model(self) -> int:
        return int(self.manifest["d_model"])

    @property
    def vocab_size(self) -> int:
        return int(self.manifest["vocab_size"])

    @classmethod
    def of(cls, model: SagoModel, aliases: Sequence[Any] = ()) -> ModelFacts:
        manifest = dict(model.exported.manifest)
        return cls(
            model.model_id, model.checkpoint, manifest, tuple(aliases or (model.checkpoint,)), model.provider
        )


@dataclass(frozen=True)
class UnitEnd:
    """A unit whose chunks are all answered: what its finish needs (``context``) and why it stopped (a
    sequential unit: one of :data:`~sago_fast.units.sequential.STOP_REASONS`; None otherwise)."""

    context: UnitContext
    model: ModelFacts
    n_examples: int  # in the dataset
    n_variants: int  # of the dataset's examples
    stop_reason: str | None = None
    n_visited: int = 0  # a sequential unit: examples visited
