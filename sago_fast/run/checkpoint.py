"""Evaluate the units of one checkpoint: load it (export cached) once, then drive each unit through it.

The same function runs in the driver process (in run order, or in lockstep under ``--until-separated``)
and in Ray tasks; it never touches the results database. Per unit it yields a :class:`ChunkOutcome` per
answered chunk (its records) and a :class:`UnitOutcome` when the unit's chunks are all answered (its
:class:`~sago_fast.units.unit_records.UnitEnd`) or it failed. The pipeline writes each chunk as it comes and
finishes the unit from its committed chunks.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sago_fast.checkpoints.resolve import Checkpoint
from sago_fast.errors import raise_if_interrupted
from sago_fast.run.config import RunConfig
from sago_fast.run.plan import Unit
from sago_fast.run.progress import RunProgress
from sago_fast.runtime.progress import NoProgress
from sago_fast.store.store import ChunksDone
from sago_fast.types import Dataset, Variant
from sago_fast.units.driver import NOTHING_DONE, StopRule, UnitJob, drive_unit
from sago_fast.units.sequential import own_precision
from sago_fast.units.unit_records import ChunkRecords, ModelFacts, UnitEnd

if TYPE_CHECKING:
    from sago_fast.runtime.model import SagoModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChunkOutcome:
    """One answered chunk of a unit (``comparisons``: the --until-separated comparisons it grew)."""

    unit_id: str
    checkpoint: str
    dataset_id: str
    records: ChunkRecords
    model: ModelFacts
    comparisons: tuple = ()

    @property
    def n_examples(self) -> int:
        return len(self.records.examples)


@dataclass(frozen=True)
class UnitOutcome:
    """A unit whose chunks are all answered (``end`` set), or the error that stopped it (``end`` None;
    its committed chunks stay)."""

    unit_id: str
    checkpoint: str
    dataset_id: str
    end: UnitEnd | None
    error: str | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.end is not None


@dataclass(frozen=True)
class CheckpointJob:
    """What evaluating the units of one checkpoint needs besides the checkpoint and its units: the
    datasets and variants by dataset id, the run's settings, where progress goes, the chunks an earlier
    invocation committed per unit id (those examples are not answered again), when a sequential unit stops
    (:class:`~sago_fast.units.driver.UnitJob`), ONNX Runtime's intra-op threads (0: its default) and whether
    they spin while they wait (:attr:`~sago_fast.runtime.session.SessionOptions.spinning`)."""

    datasets: Mapping[str, Dataset]
    variants: Mapping[str, list[Variant]]
    config: RunConfig
    progress: RunProgress | None = None
    resume: Mapping[str, ChunksDone] = field(default_factory=dict)
    stop_rule: StopRule = own_precision
    session_threads: int = 0
    spinning: bool = True


def evaluate_checkpoint(
    checkpoint: Checkpoint, units: Iterable[Unit], job: CheckpointJob
) -> Iterator[ChunkOutcome | UnitOutcome]:
    """Yield each unit's chunks then its outcome; a checkpoint that cannot be loaded fails all its units."""
    import sago_fast
    from sago_fast.runtime.session import SessionOptions

    start = time.perf_counter()
    where = str(checkpoint.display_path)
    try:
        model = sago_fast.load_model(
            checkpoint,
            device=job.config.device,
            cache_dir=job.config.cache_dir,
            session_options=SessionOptions(intra_op_threads=job.session_threads, spinning=job.spinning),
        )
    except Exception as exc:
        raise_if_interrupted(exc)
        message = _describe(exc)
        for unit in units:
            yield UnitOutcome(
                unit.unit_id, where, unit.dataset_id, None, message, time.perf_counter() - start
            )
        return
    with model:
        for unit in units:
            yield from _units_outcomes(model, unit, job)


def _units_outcomes(model: SagoModel, unit: Unit, job: CheckpointJob) -> Iterator[ChunkOutcome | UnitOutcome]:
    """One unit through :func:`~sago_fast.units.driver.drive_unit`: its chunks, then its outcome."""
    where = str(model.checkpoint.display_path)
    start = time.perf_counter()
    data, config = job.datasets[unit.dataset_id], job.config
    label = f"{model.checkpoint.display_path.name} × {data.name}"
    shown = job.progress.unit_started(label, unit.unit_id) if job.progress is not None else NoProgress()
    model = model.configured(progress=shown)  # the unit's passes are shown on its own bar
    facts = ModelFacts.of(model, unit.aliases)
    unit_job = UnitJob(
        model,
        facts,
        data,
        job.variants[unit.dataset_id],
        config.answer_settings,
        config.stream_settings,
        config.sequential,
        done=job.resume.get(unit.unit_id, NOTHING_DONE),
        stop_rule=job.stop_rule,
        unit_id=unit.unit_id,
    )
    try:
        for record in drive_unit(unit_job):
            if isinstance(record, UnitEnd):
                end = record
            else:
                yield ChunkOutcome(unit.unit_id, where, unit.dataset_id, record, facts)
    except Exception as exc:
        raise_if_interrupted(exc)
        yield UnitOutcome(
            unit.unit_id, where, unit.dataset_id, None, _describe(exc), time.perf_counter() - start
        )
        return
    finally:
        shown.close()
    if end.stop_reason is not None:
        log.info(
            "%s × %s: sequential unit stopped (%s) after %d of %d examples",
            where,
            data.name,
            end.stop_reason,
            end.n_visited,
            end.n_examples,
        )
    yield UnitOutcome(unit.unit_id, where, unit.dataset_id, end, None, time.perf_counter() - start)


def _describe(exc: BaseException) -> str:
    log.debug("unit failed:\n%s", "".join(traceback.format_exception(exc)))
    return " ".join(f"{type(exc).__name__}: {exc}".split())  # one line, in the log and units.error
