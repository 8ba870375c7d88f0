"""The one way through a unit: one model on one dataset's variants, chunk by chunk, into records.

:func:`drive_unit` is the only unit driver. ``sago run`` (in this process, in Ray tasks, in lockstep
under ``--until-separated``), :func:`evaluate_unit` (library use, tests, the README) all go through it:

1. check that some prompt fits the model (:func:`~sago_fast.answers.prompting.check_some_fit`; a long one is cut
   from the left when answered, lm-eval's rule), plan the chunks (whole examples, as many as the memory budget
   holds; a sequential unit in its visiting order, within its budget) and leave out committed ones;
2. per chunk: answer it (both passes, :func:`~sago_fast.answers.answering.answer_chunk`), score it into
   records (:func:`~sago_fast.units.chunk.chunk_records`), then, for a sequential
   unit, feed its followed values to the confidence sequences; yield its :class:`ChunkRecords`;
3. ask the stop rule after each chunk (a sequential unit); yield a :class:`UnitEnd` last.

Rows are made from the records at the sink (:mod:`sago_fast.units.rows`); here nothing knows of tables.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sago_fast.answers.answering import AnswerSettings, answer_chunk
from sago_fast.answers.prompting import check_some_fit
from sago_fast.axes.levels import Partial
from sago_fast.runtime.decode import GenerationSettings
from sago_fast.store.store import ChunksDone
from sago_fast.types import Dataset, Variant
from sago_fast.units import rows as build
from sago_fast.units.chunk import chunk_records, finish_unit, prepare_unit
from sago_fast.units.rows import TableRows
from sago_fast.units.sequential import (
    SequentialSettings,
    SequentialTracker,
    chunk_values,
    own_precision,
    start_sequence,
)
from sago_fast.units.stream_settings import StreamSettings
from sago_fast.units.unit_records import ChunkRecords, ModelFacts, UnitEnd

if TYPE_CHECKING:
    from sago_fast.answers.protocol import LanguageModel
    from sago_fast.runtime.model import SagoModel

NOTHING_DONE = ChunksDone(0, (), 0, 0, 0.0)

# Why a sequential unit stops now, asked after each of its chunks (None: go on): unit id, its tracker.
StopRule = Callable[[str, SequentialTracker], str | None]


@dataclass(frozen=True)
class UnitJob:
    """Everything one unit's evaluation needs, in one value: the model and what is recorded of it
    (``facts``, built once), the dataset and its variants, how they are answered (``settings``) and
    streamed (``stream``), a sequential unit's settings, the chunks an earlier invocation committed
    (``done``: their examples are not answered again; a sequential unit's tracker is fed their values), when
    a sequential unit stops (``stop_rule``: asked before its first chunk and after each, after a yield: when
    the consumer comes back for more) and the unit's id (for the stop rule)."""

    model: LanguageModel
    facts: ModelFacts
    data: Dataset
    variants: Sequence[Variant]
    settings: AnswerSettings
    stream: StreamSettings = field(default_factory=StreamSettings)
    sequential: SequentialSettings | None = None
    done: ChunksDone = NOTHING_DONE
    stop_rule: StopRule = own_precision
    unit_id: str = ""


def drive_unit(job: UnitJob) -> Iterator[ChunkRecords | UnitEnd]:
    """Yield the records of every chunk of ``job``'s unit not in ``job.done``, then its :class:`UnitEnd`."""
    model, data, variants, settings, done = job.model, job.data, job.variants, job.settings, job.done
    facts, stop_rule, unit_id = job.facts, job.stop_rule, job.unit_id
    ordered, tracker = start_sequence(variants, job.sequential or SequentialSettings(), done.sequence_values)
    check_some_fit(model, data, variants, settings.prompt_format, settings.generation.max_new_tokens)
    context, chunks = prepare_unit(facts, ordered, job.stream, frozenset(done.example_ids))
    examples = {e.example_id: e for e in data.examples}
    stop = stop_rule(unit_id, tracker) if tracker is not None else None  # stopped before an interruption
    for offset, chunk_variants in enumerate(chunks):
        if stop is not None:
            break
        known = tracker is not None and tracker.stability_known  # a sampled design spends no more cells
        if known:  # canonical prompts alone, and no replicate pass: no instability is measured on them
            chunk_variants = [v for v in chunk_variants if v.is_canonical]
        start = time.perf_counter()
        chunk_examples = [examples[e] for e in dict.fromkeys(v.example_id for v in chunk_variants)]
        answers, alone = answer_chunk(model, chunk_examples, chunk_variants, settings, replicate=not known)
        index = done.n_chunks + offset
        records = chunk_records(context, examples, chunk_variants, answers, alone, model.tokenizer, index)
        del answers, alone  # the chunk's (Nv, vocab) and hidden-state arrays go before the next chunk's come
        seconds = time.perf_counter() - start
        if tracker is None:
            yield replace(records, seconds=seconds)
            continue
        values = chunk_values(records.example_ids, records.canonical_correct, records.scored.items)
        bounds = tuple(tracker.add_chunk(values))
        yield replace(records, seconds=seconds, followed=values, bounds=bounds, n_visited=tracker.n_examples)
        stop = stop_rule(unit_id, tracker)
    if tracker is not None and stop is None:
        stop = tracker.end_reason(len(data.examples))
    yield UnitEnd(
        context,
        facts,
        len(data.examples),
        len(variants),
        stop,
        tracker.n_examples if tracker is not None else 0,
    )


# -- in memory: library use and tests ------------------------------------------------------------------------
@dataclass
class UnitTables:
    """Column dicts per table of a whole unit (every chunk, then the finish), ready for ``Store.insert``."""

    tables: TableRows = field(default_factory=dict)
    accuracy: float = float("nan")  # canonical-variant accuracy

    def table(self, name: str) -> dict[str, Any]:
        return self.tables.get(name, {})


def evaluate_unit(
    model: SagoModel,
    data: Dataset,
    variants: Sequence[Variant],
    settings: AnswerSettings | GenerationSettings | None = None,
    stream: StreamSettings | None = None,
) -> UnitTables:
    """:func:`drive_unit` into memory: the whole unit's rows (library use and tests; ``sago run`` commits
    chunk by chunk instead), without the run's identity columns.

    settings: prompt format, answer mode and generation limits (a bare :class:`GenerationSettings`
    means plain prompts and ``cloze`` answers)."""
    if not isinstance(settings, AnswerSettings):
        settings = AnswerSettings(generation=settings or GenerationSettings())
    parts: list[TableRows] = []
    partials: list[dict[str, Partial]] = []
    correct = 0
    job = UnitJob(model, ModelFacts.of(model), data, variants, settings, stream or StreamSettings())
    for record in drive_unit(job):
        if isinstance(record, UnitEnd):
            parts.append(build.scored_columns(finish_unit(record.context, partials)))
            n = record.context.n_examples
            return UnitTables(build.concat(parts), correct / n if n else float("nan"))
        parts.append(build.chunk_tables(data.dataset_id, record))
        partials.append(record.partials)
        correct += record.n_canonical_correct
    raise AssertionError("drive_unit ends with a UnitEnd")
