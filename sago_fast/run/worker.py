"""Evaluate the units of one checkpoint: load (export, cached) once, answer every dataset, return rows.

The same function runs in the driver process (local executor) and in Ray workers; it never touches the
results database: what it returns is written by a sink (DuckDB or Parquet shards) in the driver.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sago_fast.checkpoints.resolve import Checkpoint
from sago_fast.datasets.resolve import Dataset
from sago_fast.errors import raise_if_interrupted
from sago_fast.run.config import RunConfig
from sago_fast.run.evaluate import evaluate_unit, variant_rows
from sago_fast.run.progress import RunProgress
from sago_fast.run.units import Unit
from sago_fast.runtime.progress import NoProgress
from sago_fast.store.schema import RESULT_TABLES
from sago_fast.types import Variant

log = logging.getLogger(__name__)

Rows = dict[str, dict[str, list[Any]]]  # table -> columns


@dataclass(frozen=True)
class UnitOutcome:
    """A finished unit: its rows (table -> columns, ``units`` row included), or the error that stopped it."""

    unit_id: str
    checkpoint: str
    dataset_id: str
    rows: Rows | None
    error: str | None
    seconds: float
    provider: str = ""
    accuracy: float = float("nan")
    n_examples: int = 0
    n_variants: int = 0


def evaluate_checkpoint(
    checkpoint: Checkpoint,
    units: Sequence[Unit],
    datasets: dict[str, Dataset],
    variants: dict[str, list[Variant]],
    config: RunConfig,
    run_id: str,
    session_threads: int = 0,
    progress: RunProgress | None = None,
) -> Iterator[UnitOutcome]:
    """Yield one outcome per unit; a checkpoint that cannot be loaded fails all its units."""
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
            data = datasets[unit.dataset_id]
            unit_start = time.perf_counter()
            try:
                label = f"{checkpoint.display_path.name} × {data.name}"
                model.progress = progress.unit_started(label) if progress is not None else NoProgress()
                tables = evaluate_unit(model, data, variants[unit.dataset_id], config.answer_settings)
            except Exception as exc:
                raise_if_interrupted(exc)
                yield UnitOutcome(
                    unit.unit_id,
                    str(checkpoint.display_path),
                    unit.dataset_id,
                    None,
                    _describe(exc),
                    time.perf_counter() - unit_start,
                )
                continue
            finally:
                model.progress.close()
                model.progress = NoProgress()
            seconds = time.perf_counter() - unit_start
            rows = unit_rows(run_id, unit, model, data, variants[unit.dataset_id], tables, seconds)
            yield UnitOutcome(
                unit.unit_id,
                str(checkpoint.display_path),
                unit.dataset_id,
                rows,
                None,
                seconds,
                model.provider,
                tables.accuracy,
                len(data.examples),
                len(variants[unit.dataset_id]),
            )


def _describe(exc: BaseException) -> str:
    log.debug("unit failed:\n%s", "".join(traceback.format_exception(exc)))
    return f"{type(exc).__name__}: {exc}"


def unit_rows(
    run_id: str,
    unit: Unit,
    model: Any,
    data: Dataset,
    variants: Sequence[Variant],
    tables: Any,
    seconds: float,
) -> Rows:
    """Every row one unit writes, ``units`` (its done mark) included."""
    manifest = model.exported.manifest
    examples = data.examples
    rows: Rows = {
        "models": {
            "model_id": [model.model_id],
            "checkpoint": [str(model.checkpoint.display_path)],
            "model_type": [manifest["model_type"]],
            "n_layers": [manifest["n_layers"]],
            "d_model": [manifest["d_model"]],
            "vocab_size": [manifest["vocab_size"]],
            "export_key": [manifest["key"]],
            "dtype": [manifest["dtype"]],
            "source_format": [model.checkpoint.source_format],
            "quantization": [model.checkpoint.quantization],
        },
        "datasets": {
            "dataset_id": [data.dataset_id],
            "name": [data.name],
            "source": [data.source],
            "reader": [data.reader],
            "task_type": [",".join(data.task_types)],
            "n_examples": [len(examples)],
        },
        "examples": {
            "dataset_id": [data.dataset_id] * len(examples),
            "example_id": [e.example_id for e in examples],
            "task_type": [e.task_type for e in examples],
            "question": [e.question for e in examples],
            "options": [list(e.options) for e in examples],
            "answer_index": [e.answer_index for e in examples],
            "answers": [list(e.answers) for e in examples],
        },
        "variants": variant_rows(data.dataset_id, variants),
    }
    for table in RESULT_TABLES:
        columns = dict(getattr(tables, table))
        if columns:
            n = len(next(iter(columns.values())))
            rows[table] = {
                "run_id": [run_id] * n,
                "model_id": [model.model_id] * n,
                "dataset_id": [data.dataset_id] * n,
                **columns,
            }
    rows["units"] = {
        "run_id": [run_id],
        "unit_id": [unit.unit_id],
        "model_id": [model.model_id],
        "dataset_id": [data.dataset_id],
        "shard": [unit.shard],
        "checkpoint": [str(model.checkpoint.display_path)],
        "status": ["done"],
        "n_examples": [len(examples)],
        "n_variants": [len(variants)],
        "accuracy": [float(tables.accuracy)],
        "seconds": [float(seconds)],
        "provider": [model.provider],
        "finished_at": [datetime.now(timezone.utc).replace(tzinfo=None)],
    }
    return rows
