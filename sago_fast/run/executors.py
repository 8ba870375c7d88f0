"""Executors turn checkpoint groups of units into outcomes: in this process, or as Ray tasks (the
lockstep scheduler of ``--until-separated``, :mod:`sago_fast.run.lockstep`, is chosen by the pipeline).

Ray (optional extra ``sago_fast[ray]``): one task per checkpoint (the model is exported and loaded once
and its session reused for all its datasets), one GPU per task on CUDA (so one ORT session per GPU) or
``cpus_per_task`` CPUs (the ORT session gets as many threads), ``max_retries`` on worker failure. Tasks
are streaming generators: each chunk's rows reach the driver as soon as they are ready, and only the
driver writes the results file.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sago_fast.errors import InputError
from sago_fast.registry import Registry
from sago_fast.run.checkpoint import CheckpointJob, ChunkOutcome, UnitOutcome, evaluate_checkpoint
from sago_fast.run.claims import Claimer
from sago_fast.run.config import RunConfig
from sago_fast.run.plan import Plan, Unit
from sago_fast.run.progress import RunProgress
from sago_fast.store.store import ChunksDone

Outcome = ChunkOutcome | UnitOutcome

log = logging.getLogger(__name__)

EXECUTORS: Registry[Any] = Registry("executor")


def _subset(plan: Plan, units: Sequence[Unit]) -> tuple[dict, dict]:
    ids = {u.dataset_id for u in units}
    return {k: v for k, v in plan.datasets.items() if k in ids}, {
        k: v for k, v in plan.variants.items() if k in ids
    }


@dataclass(frozen=True)
class Work:
    """What an executor (or the lockstep scheduler) is given: the run's plan, the units to do, its
    settings, where progress goes, the chunks earlier invocations committed (unit id -> chunks; a claim
    adds to it), and ``claimer``: set when units are claimed one at a time, as they are reached (other
    processes write the same file), None when they are all this process's."""

    plan: Plan
    units: Sequence[Unit]
    config: RunConfig
    progress: RunProgress | None = None
    resume: Mapping[str, ChunksDone] = field(default_factory=dict)
    claimer: Claimer | None = None


@EXECUTORS.register("local")
def local_outcomes(work: Work) -> Iterator[Outcome]:
    """One checkpoint after the other, in run order, in this process; each unit claimed when it is
    reached (a checkpoint none of whose units can be claimed is not loaded; one another process is
    working on comes last, so that processes sharing a file start on different models)."""
    plan, claimer = work.plan, work.claimer
    groups = plan.by_checkpoint(work.units)
    if claimer is not None:
        busy = [claimer.busy(group) for _, group in groups]
        groups = [g for g, b in zip(groups, busy, strict=True) if not b] + [
            g for g, b in zip(groups, busy, strict=True) if b
        ]
    for checkpoint, group in groups:
        units: Iterator[Unit] = iter(group) if claimer is None else (u for u in group if claimer.claim(u))
        first = next(units, None)
        if first is None:
            continue
        job = CheckpointJob(
            plan.datasets,
            plan.variants,
            work.config,
            progress=work.progress,
            resume=work.resume,
            # processes sharing the cores: ONNX Runtime's threads sleep, not spin, while they wait
            spinning=claimer is None or not claimer.shares_cores(),
        )
        yield from evaluate_checkpoint(checkpoint, itertools.chain([first], units), job)


def _ray_task(checkpoint, units, job) -> Iterator[Outcome]:  # type: ignore[no-untyped-def]
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    yield from evaluate_checkpoint(checkpoint, units, job)


@EXECUTORS.register("ray")
def ray_outcomes(work: Work) -> Iterator[Outcome]:
    """Chunks and units finish on the workers; ``progress`` hears of each when its outcome arrives."""
    try:
        import ray
    except ImportError:
        raise InputError("--executor ray needs the Ray extra: pip install 'sago_fast[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        # RAY_ADDRESS joins an existing cluster; otherwise a local one is started for this run
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False)
    try:
        plan, config, resume = work.plan, work.config, work.resume
        gpus = 1 if config.device == "cuda" else 0
        cpus = config.ray_cpus_per_task
        task = ray.remote(
            num_cpus=cpus, num_gpus=gpus, max_retries=config.ray_max_retries, num_returns="streaming"
        )(_ray_task)
        streams = []
        for checkpoint, group in plan.by_checkpoint(work.units):
            datasets, variants = _subset(plan, group)
            mine = {u.unit_id: resume[u.unit_id] for u in group if u.unit_id in resume}
            job = CheckpointJob(datasets, variants, config, resume=mine, session_threads=max(1, int(cpus)))
            streams.append(task.remote(checkpoint, group, job))
        while streams:
            ready, _ = ray.wait(streams, num_returns=1)
            stream: Any = ready[0]  # an ObjectRefGenerator: the next chunk or unit is ready
            try:
                yield ray.get(next(stream))
            except StopIteration:
                streams.remove(stream)
    finally:
        if started_here:
            ray.shutdown()
