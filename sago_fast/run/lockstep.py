"""The models of a run in lockstep, for ``--until-separated`` (this process only).

Every checkpoint is a stream of outcomes (:func:`~sago_fast.run.checkpoint.evaluate_checkpoint`: its model
loaded once, its datasets in run order). The scheduler always advances the stream that is furthest
behind: the one on the earliest dataset with the fewest examples committed in it (ties: run order), one
chunk at a time. Every chunk's values go to the :class:`~sago_fast.units.separation.SeparationMonitor`
(its comparison bounds are written with the chunk), and a unit asks the monitor at each of its turns
whether to stop. The models of a run are therefore loaded together while they are compared.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from sago_fast.errors import InputError
from sago_fast.run.checkpoint import CheckpointJob, ChunkOutcome, UnitOutcome, evaluate_checkpoint
from sago_fast.run.config import RunConfig
from sago_fast.run.executors import Work
from sago_fast.run.plan import Plan, Unit
from sago_fast.store.store import ChunksDone
from sago_fast.units.driver import NOTHING_DONE
from sago_fast.units.separation import SeparationMonitor, Side
from sago_fast.units.sequential import decode_values, visited_variants

log = logging.getLogger(__name__)


@dataclass
class _Stream:
    """One checkpoint's outcomes and where it stands: its unit in progress and the examples it has."""

    rank: int  # run order
    units: list[Unit]
    outcomes: Iterator[ChunkOutcome | UnitOutcome]
    position: int = 0  # the unit in progress
    examples: int = 0  # examples committed in it

    def key(self, dataset_rank: Mapping[str, int]) -> tuple[int, int, int]:
        return dataset_rank[self.units[self.position].dataset_id], self.examples, self.rank


def comparison_monitor(plan: Plan, config: RunConfig) -> SeparationMonitor:
    """The comparisons of neighbouring units of each dataset of ``plan`` (every unit, done ones too)."""
    orders = {dataset_id: _visited_ids(variants, config) for dataset_id, variants in plan.variants.items()}
    sides = [Side(u.unit_id, u.model_id, u.dataset_id) for u in plan.units]
    monitor = SeparationMonitor.neighbours(config.sequential, sides, orders)
    if not monitor.comparisons:
        raise InputError(
            "--until-separated needs at least two models to compare (consecutive models of the run are "
            f"compared), got {len({u.model_id for u in plan.units})}"
        )
    return monitor


def _visited_ids(variants: Sequence, config: RunConfig) -> list[str]:
    return list(dict.fromkeys(v.example_id for v in visited_variants(variants, config.sequential)))


def lockstep_outcomes(work: Work) -> Iterator[ChunkOutcome | UnitOutcome]:
    """``work.units`` to do, the models advancing together (see the module docstring). ``work.resume``:
    the chunks committed by an earlier invocation, of the units to do and of the finished ones (their
    values feed the comparisons again)."""
    plan, units, config, progress, resume = work.plan, work.units, work.config, work.progress, work.resume
    monitor = comparison_monitor(plan, config)
    for unit in plan.units:
        for text in resume.get(unit.unit_id, NOTHING_DONE).sequence_values:
            monitor.add_unit_chunk(unit.unit_id, decode_values(text))
    dataset_rank = {dataset_id: i for i, dataset_id in enumerate(plan.datasets)}
    groups = plan.by_checkpoint(units)
    log.info(
        "--until-separated: %d models advance together (their sessions stay loaded), %d comparisons",
        len(groups),
        len(monitor.comparisons),
    )
    streams = []
    for rank, (checkpoint, group) in enumerate(groups):
        group = sorted(group, key=lambda u: dataset_rank[u.dataset_id])
        job = CheckpointJob(
            plan.datasets,
            plan.variants,
            config,
            progress=progress,
            resume=resume,
            stop_rule=monitor.stop_reason,
        )
        outcomes = evaluate_checkpoint(checkpoint, group, job)
        streams.append(_Stream(rank, group, outcomes, examples=_committed(resume, group[0])))
    while streams:
        stream = min(streams, key=lambda s: s.key(dataset_rank))
        outcome = next(stream.outcomes)  # one outcome per chunk and per unit: never past its last unit
        if isinstance(outcome, ChunkOutcome):
            stream.examples += outcome.n_examples
            grown = monitor.add_unit_chunk(outcome.unit_id, outcome.records.followed or {})
            if grown:  # committed with the chunk, and said then (say_committed)
                outcome = replace(outcome, comparisons=tuple(grown))
        else:
            if outcome.end is None:
                monitor.drop(outcome.unit_id)
            stream.position += 1
            if stream.position < len(stream.units):
                stream.examples = _committed(resume, stream.units[stream.position])
            else:  # its last unit: run the stream to its end, which closes the model
                next(stream.outcomes, None)
                streams.remove(stream)
        yield outcome


def _committed(resume: Mapping[str, ChunksDone], unit: Unit) -> int:
    done = resume.get(unit.unit_id)
    return len(done.example_ids) if done is not None else 0
