"""Row builders: the one place where what a run produced (records, :mod:`sago_fast.units.unit_records`) becomes
table columns. (Records are typed ``Any`` here: the store sits below the run and never imports it.)

A builder returns ``{column: values}`` for :meth:`sago_fast.store.Store.insert`; :data:`TableRows` maps
table names to such columns. Result tables get the unit's identity (run, model, dataset) added by
:func:`with_identity`; shared tables (models, datasets, examples, variants) are keyed by
:data:`sago_fast.store.schema.ROW_KEYS`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import numpy as np

from sago_fast.store.schema import RESULT_TABLES

if TYPE_CHECKING:
    from sago_fast.axes.scored import ScoredRows
    from sago_fast.types import Dataset, Example, Variant
    from sago_fast.units.unit_records import ChunkRecords, ModelFacts

Columns = dict[str, Any]
TableRows = dict[str, Columns]  # table -> columns


def now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def concat(parts: Iterable[TableRows]) -> TableRows:
    """Tables of several parts, column by column (lists and arrays both become lists)."""
    out: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for part in parts:
        for table, columns in part.items():
            for name, values in columns.items():
                out[table][name].extend(values.tolist() if isinstance(values, np.ndarray) else values)
    return {table: dict(columns) for table, columns in out.items()}


def n_rows(columns: Columns) -> int:
    return len(next(iter(columns.values()))) if columns else 0


def with_identity(rows: TableRows, run_id: str, model_id: str, dataset_id: str) -> TableRows:
    """Result tables with the unit's run, model and dataset columns first; other tables as they are."""
    out: TableRows = {}
    for table, columns in rows.items():
        n = n_rows(columns)
        if table in RESULT_TABLES:
            if n == 0:
                continue
            columns = {
                "run_id": [run_id] * n,
                "model_id": [model_id] * n,
                "dataset_id": [dataset_id] * n,
                **columns,
            }
        out[table] = columns
    return out


# -- records of a chunk ---------------------------------------------------------------------------------
def record_columns(records: Sequence[Any]) -> Columns:
    """Columns of dataclass records (one row each), in field order; no records, no columns."""
    if not records:
        return {}
    names = [f.name for f in fields(records[0])]
    return {name: [getattr(r, name) for r in records] for name in names}


def chunk_tables(dataset_id: str, chunk: Any) -> TableRows:
    """A chunk's rows without the unit's identity: its examples and variants, both replicates' outputs
    and answer modes, and its item and layer scores."""
    return {
        "examples": example_columns(dataset_id, chunk.examples),
        "variants": variant_columns(dataset_id, chunk.variants),
        "outputs": record_columns(chunk.outputs),
        "mode_answers": record_columns(chunk.mode_answers),
        "design_cells": design_cell_columns(chunk.variants),
        **scored_columns(chunk.scored),
    }


def design_cell_columns(variants: Sequence[Variant]) -> Columns:
    """``design_cells`` rows: each drawn cell (example × family) of a sampled design and its inclusion
    probability; none under the full design (every applicable cell, probability 1)."""
    cells = {(v.example_id, v.family): v.inclusion for v in variants if v.inclusion < 1.0}
    return {
        "example_id": [e for e, _ in cells],
        "family": [f for _, f in cells],
        "inclusion": list(cells.values()),
    }


def chunk_rows(
    run_id: str,
    unit_id: str,
    data: Dataset,
    model: ModelFacts,
    chunk: ChunkRecords,
    settings: Any = None,
    comparisons: Sequence[Any] = (),
) -> TableRows:
    """Everything one committed chunk writes, in one transaction: the model, dataset and checkpoint names
    (keyed: written once), the chunk's tables with the unit's identity, its ``unit_chunks`` row (with the
    dataset scorers' partial state and a sequential unit's followed values), a sequential unit's
    confidence sequences after it (``settings``: the run's SequentialSettings) and, under
    ``--until-separated``, the comparisons it grew (``comparisons``: PairBounds)."""
    from sago_fast.axes.levels import pack_partials
    from sago_fast.units.sequential import encode_values

    key = UnitKey(run_id, unit_id, model.model_id, data.dataset_id)
    done = ChunkDone(
        chunk.index,
        chunk.example_ids,
        chunk.n_variants,
        chunk.n_canonical_correct,
        chunk.seconds,
        pack_partials(chunk.partials),
        None if chunk.followed is None else encode_values(chunk.followed),
    )
    rows: TableRows = {
        **model_rows(run_id, model, data),
        **with_identity(chunk_tables(data.dataset_id, chunk), run_id, model.model_id, data.dataset_id),
        "unit_chunks": chunk_columns(key, done),
    }
    if chunk.bounds:
        rows["confidence_sequences"] = sequence_columns(
            key, chunk.index, chunk.n_visited, chunk.bounds, settings
        )
    if comparisons:
        rows["comparison_sequences"] = comparison_sequence_columns(
            run_id, unit_id, chunk.index, comparisons, settings
        )
    return rows


def finish_rows(
    run_id: str, unit_id: str, shard: int, data: Dataset, end: Any, scored: ScoredRows, chunks: Any
) -> TableRows:
    """A unit's last rows: its dataset scorers' rows (``scored``, from the committed chunks' partials) and
    its ``units`` row, the done mark (accuracy and seconds summed over ``chunks``: the committed
    :class:`~sago_fast.store.store.ChunksDone`; a sequential unit counts the examples it used)."""
    model = end.model
    sequential = end.stop_reason is not None
    n = len(chunks.example_ids) if sequential else end.n_examples
    rows = {
        **model_rows(run_id, model, data),
        **with_identity(scored_columns(scored), run_id, model.model_id, data.dataset_id),
    }
    done = UnitDone(
        shard,
        str(model.checkpoint.display_path),
        n,
        chunks.n_variants if sequential else end.n_variants,
        chunks.n_canonical_correct / n if n else float("nan"),
        chunks.seconds,
        model.provider,
        chunks.n_chunks,
        end.stop_reason,
        end.n_examples if sequential else None,
    )
    rows["units"] = unit_columns(UnitKey(run_id, unit_id, model.model_id, data.dataset_id), done)
    return rows


def model_rows(run_id: str, model: ModelFacts, data: Dataset) -> TableRows:
    """The keyed rows every chunk and finish of a unit carries: its model, dataset and checkpoint names."""
    return {
        "models": model_columns(model),
        "datasets": dataset_columns(data),
        "checkpoint_names": checkpoint_name_columns(run_id, model.model_id, model.aliases),
    }


# -- what the scorers computed --------------------------------------------------------------------------
def scored_columns(scored: ScoredRows) -> TableRows:
    """``item_scores``, ``layer_scores``, ``dataset_scores`` and ``unit_estimators`` columns (every column
    present, with no rows too)."""
    from sago_fast.axes.scored import DatasetScore, Estimator, ItemScore

    layers = scored.layers
    return {
        "item_scores": _typed_columns(ItemScore, scored.items),
        "layer_scores": {
            "example_id": [e for block in layers for e in block.example_id],
            "layer": [int(x) for block in layers for x in block.layer],
            "pooling": [block.pooling for block in layers for _ in range(len(block))],
            "metric": [m for block in layers for m in block.metric],
            "family": [f for block in layers for f in block.family],
            "value": [float(v) for block in layers for v in block.value],
        },
        "dataset_scores": _typed_columns(DatasetScore, scored.datasets),
        "unit_estimators": _typed_columns(Estimator, scored.estimators),
    }


def _typed_columns(kind: type, records: Sequence[Any]) -> Columns:
    """Columns of ``records`` (dataclasses of ``kind``), in field order; ``value`` as Python floats."""
    columns = {f.name: [getattr(r, f.name) for r in records] for f in fields(kind)}
    if "value" in columns:
        columns["value"] = [float(v) for v in columns["value"]]
    return columns


# -- what was evaluated ---------------------------------------------------------------------------------
def model_columns(model: ModelFacts) -> Columns:
    """The ``models`` row of a loaded model: its graph (``graph_key``: the cache entry whose graph it runs,
    shared by re-weighted siblings and an adapter's base), source, quantisation, training-run position and
    an adapter's base."""
    manifest = model.manifest
    checkpoint = model.checkpoint
    position = checkpoint.position
    return {
        "model_id": [model.model_id],
        "checkpoint": [str(checkpoint.display_path)],
        "model_type": [manifest["model_type"]],
        "n_layers": [manifest["n_layers"]],
        "d_model": [manifest["d_model"]],
        "vocab_size": [manifest["vocab_size"]],
        "export_key": [manifest["key"]],
        "dtype": [manifest["dtype"]],
        "source_format": [checkpoint.source_format],
        "quantization": [checkpoint.quantization],
        "training_run": [position.training_run],
        "step": [position.step],
        "tokens_seen": [position.tokens_seen],
        "base_model_id": [checkpoint.base.content_hash if checkpoint.base is not None else None],
        "graph_key": [manifest.get("graph_from") or manifest["key"]],
    }


def checkpoint_name_columns(run_id: str, model_id: str, checkpoints: Sequence[Any]) -> Columns:
    """``checkpoint_names``: every name (and training-run step) under which the run met ``model_id``'s
    content; identical checkpoints are evaluated once and recorded under each of their names."""
    return {
        "run_id": [run_id] * len(checkpoints),
        "model_id": [model_id] * len(checkpoints),
        "checkpoint": [str(c.display_path) for c in checkpoints],
        "training_run": [c.position.training_run for c in checkpoints],
        "step": [c.position.step for c in checkpoints],
        "tokens_seen": [c.position.tokens_seen for c in checkpoints],
    }


def dataset_columns(data: Dataset) -> Columns:
    return {
        "dataset_id": [data.dataset_id],
        "name": [data.name],
        "source": [data.source],
        "reader": [data.reader],
        "task_type": [",".join(data.task_types)],
        "n_examples": [len(data.examples)],
    }


def _attributes(items: Sequence[Any], *names: str) -> Columns:
    """One column per attribute name of ``items`` (tuples stored as lists)."""
    return {name: [_listed(getattr(item, name)) for item in items] for name in names}


def _listed(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def example_columns(dataset_id: str, examples: Sequence[Example]) -> Columns:
    return {
        "dataset_id": [dataset_id] * len(examples),
        **_attributes(examples, "example_id", "task_type", "question", "options", "answer_index", "answers"),
    }


def variant_columns(dataset_id: str, variants: Sequence[Variant]) -> Columns:
    columns = _attributes(
        variants,
        "example_id",
        "variant_id",
        "family",
        "params",
        "is_canonical",
        "meaning_preserving",
        "prompt",
        "option_order",
        "option_labels",
        "system_prompt",
    )
    columns["params_json"] = columns.pop("params")
    order = (
        "example_id",
        "variant_id",
        "family",
        "params_json",
        "is_canonical",
        "meaning_preserving",
        "prompt",
    )
    ordered = {name: columns.pop(name) for name in order}  # the table's column order
    return {"dataset_id": [dataset_id] * len(variants), **ordered, **columns}


# -- the run's own records --------------------------------------------------------------------------------
@dataclass(frozen=True)
class UnitKey:
    """The identity every row of a unit's own records carries."""

    run_id: str
    unit_id: str
    model_id: str
    dataset_id: str

    def columns(self, n: int) -> Columns:
        return _repeated(
            n, run_id=self.run_id, unit_id=self.unit_id, model_id=self.model_id, dataset_id=self.dataset_id
        )


@dataclass(frozen=True)
class UnitDone:
    """What a finished unit's ``units`` row says (a sequential unit: why it stopped and how many examples
    it could have used)."""

    shard: int
    checkpoint: str
    n_examples: int
    n_variants: int
    accuracy: float
    seconds: float
    provider: str
    n_chunks: int
    stop_reason: str | None = None
    examples_available: int | None = None


@dataclass(frozen=True)
class ChunkDone:
    """What a committed chunk's ``unit_chunks`` row says (``state``: its dataset scorers' partials;
    ``sequence_values``: a sequential unit's followed values, JSON)."""

    chunk: int
    example_ids: Sequence[str]
    n_variants: int
    n_canonical_correct: int
    seconds: float
    state: bytes
    sequence_values: str | None = None


def unit_columns(key: UnitKey, done: UnitDone) -> Columns:
    """The ``units`` row: the unit's done mark, written with its last rows."""
    return {
        **key.columns(1),
        "shard": [done.shard],
        "checkpoint": [done.checkpoint],
        "status": ["done"],
        "n_examples": [done.n_examples],
        "n_variants": [done.n_variants],
        "accuracy": [float(done.accuracy)],
        "seconds": [float(done.seconds)],
        "provider": [done.provider],
        "finished_at": [now()],
        "n_chunks": [done.n_chunks],
        "stop_reason": [done.stop_reason],
        "examples_available": [done.examples_available],
    }


def chunk_columns(key: UnitKey, chunk: ChunkDone) -> Columns:
    """The ``unit_chunks`` row of a committed chunk."""
    return {
        "run_id": [key.run_id],
        "unit_id": [key.unit_id],
        "chunk": [chunk.chunk],
        "model_id": [key.model_id],
        "dataset_id": [key.dataset_id],
        "example_ids": [list(chunk.example_ids)],
        "n_examples": [len(chunk.example_ids)],
        "n_variants": [chunk.n_variants],
        "n_canonical_correct": [chunk.n_canonical_correct],
        "seconds": [float(chunk.seconds)],
        "finished_at": [now()],
        "state": [chunk.state],
        "sequence_values": [chunk.sequence_values],
    }


def sequence_columns(
    key: UnitKey, chunk: int, n_examples: int, bounds: Sequence[Any], settings: Any
) -> Columns:
    """``confidence_sequences`` rows of one chunk: each followed metric's sequence after it (``bounds``:
    :class:`~sago_fast.units.sequential.MetricBounds`; ``n_examples``: visited so far; ``settings``: the
    unit's :class:`~sago_fast.units.sequential.SequentialSettings`)."""
    n = len(bounds)
    return {
        **key.columns(n),
        **_repeated(n, chunk=chunk, n_examples=n_examples),
        "metric": [b.metric for b in bounds],
        "n_values": [b.n for b in bounds],
        **_attributes(bounds, "estimate", "lower", "upper", "half_width"),
        **_repeated(n, precision=settings.precision, alpha=settings.alpha),
    }


def _repeated(n: int, **values: Any) -> Columns:
    """Columns of ``n`` rows that all hold the same value."""
    return {name: [value] * n for name, value in values.items()}


def comparison_sequence_columns(
    run_id: str, unit_id: str, chunk: int, bounds: Sequence[Any], settings: Any
) -> Columns:
    """``comparison_sequences`` rows written with chunk ``chunk`` of ``unit_id``: the comparisons whose
    paired prefix it grew (``bounds``: :class:`~sago_fast.units.separation.PairBounds`; ``settings``: the
    run's :class:`~sago_fast.units.sequential.SequentialSettings`)."""
    n = len(bounds)
    precision = settings.precision
    return {
        **_repeated(n, run_id=run_id, unit_id=unit_id, chunk=chunk),
        "dataset_id": [b.dataset_id for b in bounds],
        "model_a": [b.a.model_id for b in bounds],
        "model_b": [b.b.model_id for b in bounds],
        "metric": [b.metric for b in bounds],
        "n_examples": [b.n_examples for b in bounds],
        "n_values": [b.n for b in bounds],
        "difference": [b.estimate for b in bounds],
        **_attributes(bounds, "lower", "upper", "half_width", "sign"),
        "settled": [b.settled(precision) for b in bounds],
        "precision": [precision] * n,
        "alpha": [b.alpha for b in bounds],
    }
