"""Evaluate the units of one checkpoint: load (export, cached) once, stream every dataset in chunks.

The same function runs in the driver process (local executor) and in Ray workers; it never touches the
results database. It yields a :class:`ChunkOutcome` per answered chunk and a :class:`UnitOutcome` when a
unit's chunks are all answered (or it failed); the driver writes each chunk as it comes and finishes the
unit (:func:`finish_rows`) from the chunks' committed partial states.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sago_fast.axes import DATASET_SCORERS
from sago_fast.axes.levels import UnitContext, pack_partials, unpack_partials
from sago_fast.checkpoints.resolve import Checkpoint
from sago_fast.errors import raise_if_interrupted
from sago_fast.run.config import RunConfig
from sago_fast.run.evaluate import check_fits, evaluate_chunks, finish_unit, model_context
from sago_fast.run.progress import RunProgress
from sago_fast.run.sequential import (
    ChunkValues,
    SequentialTracker,
    chunk_values,
    encode_values,
    own_precision,
    start_sequence,
)
from sago_fast.run.units import Unit
from sago_fast.runtime.progress import NoProgress
from sago_fast.store import rows as build
from sago_fast.store.rows import TableRows
from sago_fast.store.store import ChunksDone
from sago_fast.types import Dataset, Variant

log = logging.getLogger(__name__)

NOTHING_DONE = ChunksDone(0, (), 0, 0, 0.0)

# Why a sequential unit stops now, asked before each of its chunks (None: go on). unit id, its tracker.
StopRule = Callable[[str, SequentialTracker], str | None]


@dataclass(frozen=True)
class ChunkOutcome:
    """One answered chunk of a unit: its rows, ``unit_chunks`` row (with the partial state) included."""

    unit_id: str
    checkpoint: str
    dataset_id: str
    chunk: int
    n_examples: int
    rows: TableRows
    seconds: float
    sequence_values: ChunkValues | None = None  # a sequential unit: the chunk's followed values


@dataclass(frozen=True)
class UnitOutcome:
    """A unit whose chunks are all answered (``context`` set, ``rows``: its model and dataset rows), or
    the error that stopped it (``rows`` None; its committed chunks stay)."""

    unit_id: str
    checkpoint: str
    dataset_id: str
    rows: TableRows | None
    error: str | None
    seconds: float
    provider: str = ""
    model_id: str = ""
    context: UnitContext | None = None
    n_examples: int = 0
    n_variants: int = 0
    stop_reason: str | None = None  # a sequential unit: precision | separated | budget | exhausted


def evaluate_checkpoint(
    checkpoint: Checkpoint,
    units: Sequence[Unit],
    datasets: dict[str, Dataset],
    variants: dict[str, list[Variant]],
    config: RunConfig,
    run_id: str,
    session_threads: int = 0,
    progress: RunProgress | None = None,
    resume: Mapping[str, ChunksDone] | None = None,
    stop_rule: StopRule = own_precision,
) -> Iterator[ChunkOutcome | UnitOutcome]:
    """Yield each unit's chunks then its outcome; a checkpoint that cannot be loaded fails all its units.
    resume: unit id -> the chunks an earlier invocation committed (those examples are not answered again);
    stop_rule: when a sequential unit stops, asked before each chunk (after a yield: when the consumer
    comes back for more)."""
    import sago_fast
    from sago_fast.runtime.session import SessionOptions

    start = time.perf_counter()
    try:
        model = sago_fast.load_model(
            checkpoint,
            device=config.device,
            cache_dir=config.cache_dir,
            session_options=SessionOptions(intra_op_threads=session_threads),
        )
    except Exception as exc:
        raise_if_interrupted(exc)
        message = _describe(exc)
        for unit in units:
            yield UnitOutcome(
                unit.unit_id,
                str(checkpoint.display_path),
                unit.dataset_id,
                None,
                message,
                time.perf_counter() - start,
            )
        return
    with model:
        for unit in units:
            yield from _evaluate(
                model,
                unit,
                datasets[unit.dataset_id],
                variants[unit.dataset_id],
                config,
                run_id,
                progress,
                (resume or {}).get(unit.unit_id, NOTHING_DONE),
                stop_rule,
            )


def _evaluate(
    model: Any,
    unit: Unit,
    data: Dataset,
    variants: list[Variant],
    config: RunConfig,
    run_id: str,
    progress: RunProgress | None,
    done: ChunksDone,
    stop_rule: StopRule = own_precision,
) -> Iterator[ChunkOutcome | UnitOutcome]:
    where = str(model.checkpoint.display_path)
    unit_start = time.perf_counter()
    shared = {
        "models": build.model_columns(model),
        "datasets": build.dataset_columns(data),
        "checkpoint_names": build.checkpoint_name_columns(
            run_id, model.model_id, unit.aliases or (model.checkpoint,)
        ),
    }
    sequential = config.sequential
    ordered, tracker = start_sequence(variants, sequential, done.sequence_values)
    stop: str | None = None
    try:
        label = f"{model.checkpoint.display_path.name} × {data.name}"
        model.progress = progress.unit_started(label, unit.unit_id) if progress is not None else NoProgress()
        settings = config.answer_settings
        stream = config.stream_settings
        check_fits(model, data, variants, settings)
        context = model_context(model, ordered, stream)
        chunk_start = time.perf_counter()
        chunks = evaluate_chunks(
            model,
            data,
            ordered,
            settings,
            context,
            stream,
            done=frozenset(done.example_ids),
            first_index=done.n_chunks,
        )
        if tracker is not None:  # stopped before an interruption: nothing to add
            stop = stop_rule(unit.unit_id, tracker)
            if stop is not None:
                chunks = iter(())
        for chunk in chunks:
            seconds = time.perf_counter() - chunk_start
            sequence: TableRows = {}
            values: ChunkValues | None = None
            values_json = None
            if tracker is not None:  # the followed metrics' values and sequences go in with the chunk
                values = chunk_values(chunk.example_ids, chunk.canonical_correct, chunk.rows["item_scores"])
                values_json = encode_values(values)
                bounds = tracker.add(values)
                sequence["confidence_sequences"] = build.sequence_columns(
                    run_id,
                    unit.unit_id,
                    model.model_id,
                    data.dataset_id,
                    chunk.index,
                    tracker.n_examples,
                    bounds,
                    sequential,
                )
            record = build.chunk_columns(
                run_id,
                unit.unit_id,
                model.model_id,
                data.dataset_id,
                chunk.index,
                chunk.example_ids,
                chunk.n_variants,
                chunk.n_canonical_correct,
                seconds,
                pack_partials(chunk.partials),
                values_json,
            )
            rows = {
                **shared,
                **build.with_identity(chunk.rows, run_id, model.model_id, data.dataset_id),
                "unit_chunks": record,
                **sequence,
            }
            yield ChunkOutcome(
                unit.unit_id,
                where,
                data.dataset_id,
                chunk.index,
                len(chunk.example_ids),
                rows,
                seconds,
                values,
            )
            if tracker is not None:
                stop = stop_rule(unit.unit_id, tracker)
                if stop is not None:
                    break
            chunk_start = time.perf_counter()
        if tracker is not None and stop is None:
            stop = "budget" if tracker.horizon < len(data.examples) else "exhausted"
    except Exception as exc:
        raise_if_interrupted(exc)
        yield UnitOutcome(
            unit.unit_id, where, data.dataset_id, None, _describe(exc), time.perf_counter() - unit_start
        )
        return
    finally:
        model.progress.close()
        model.progress = NoProgress()
    if stop is not None:
        log.info(
            "%s × %s: sequential unit stopped (%s) after %d of %d examples",
            where,
            data.name,
            stop,
            tracker.n_examples if tracker is not None else 0,
            len(data.examples),
        )
    yield UnitOutcome(
        unit.unit_id,
        where,
        data.dataset_id,
        shared,
        None,
        time.perf_counter() - unit_start,
        model.provider,
        model.model_id,
        context,
        len(data.examples),
        len(variants),
        stop,
    )


def _describe(exc: BaseException) -> str:
    log.debug("unit failed:\n%s", "".join(traceback.format_exception(exc)))
    return f"{type(exc).__name__}: {exc}"


def finish_rows(
    run_id: str, unit: Unit, outcome: UnitOutcome, chunks: ChunksDone, states: Sequence[bytes]
) -> TableRows:
    """A unit's last rows: every dataset scorer's finish over the committed chunks' states, and the
    ``units`` row (its done mark; accuracy and seconds summed over the chunks)."""
    assert outcome.context is not None and outcome.rows is not None
    names = DATASET_SCORERS.names()
    partials = [unpack_partials(state, names) for state in states]
    rows = build.with_identity(
        finish_unit(outcome.context, partials), run_id, outcome.model_id, outcome.dataset_id
    )
    sequential = outcome.stop_reason is not None
    n = len(chunks.example_ids) if sequential else outcome.n_examples  # a sequential unit: those it used
    rows["units"] = build.unit_columns(
        run_id,
        unit.unit_id,
        outcome.model_id,
        outcome.dataset_id,
        shard=unit.shard,
        checkpoint=outcome.checkpoint,
        n_examples=n,
        n_variants=chunks.n_variants if sequential else outcome.n_variants,
        accuracy=chunks.n_canonical_correct / n if n else float("nan"),
        seconds=chunks.seconds,
        provider=outcome.provider,
        n_chunks=chunks.n_chunks,
        stop_reason=outcome.stop_reason,
        examples_available=outcome.n_examples if sequential else None,
    )
    return {**outcome.rows, **rows}
