"""Drive a run: plan units, skip the finished ones, resume the unfinished ones after their last committed
chunk, evaluate the rest (locally or on Ray), write each chunk as it comes (one transaction, or one
Parquet chunk folder when sharded) and finish each unit from its chunks' partial states."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sago_fast.atomic import is_disk_full
from sago_fast.axes import DATASET_SCORERS
from sago_fast.axes.levels import unpack_partials
from sago_fast.errors import DiskFullError, Interrupted, SagoError
from sago_fast.run.checkpoint import ChunkOutcome, UnitOutcome
from sago_fast.run.claims import PlannedUnit, UnitClaimer
from sago_fast.run.committer import Committer
from sago_fast.run.config import RunConfig
from sago_fast.run.executors import EXECUTORS, Work
from sago_fast.run.plan import Plan, Unit, parse_shard, plan_run
from sago_fast.run.progress import RunProgress
from sago_fast.run.sinks import DuckDBSink, ParquetShardSink, Sink
from sago_fast.runinfo import run_row
from sago_fast.runtime.light import start_without_torch_if_exported
from sago_fast.store import Store
from sago_fast.store.compact import compact
from sago_fast.store.store import ChunksDone
from sago_fast.types import Dataset
from sago_fast.units import rows as build
from sago_fast.units.chunk import finish_unit
from sago_fast.units.separation import say_committed

log = logging.getLogger(__name__)


class UnitsFailedError(SagoError):
    """Some units failed (or training-run members were skipped); the others were written and stay, and
    ``result`` describes them."""

    def __init__(self, message: str, result: RunResult | None = None) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class UnitResult:
    model_id: str
    checkpoint: str
    dataset_id: str
    n_examples: int
    n_variants: int
    accuracy: float  # canonical-variant accuracy
    seconds: float


@dataclass(frozen=True)
class RunResult:
    run_id: str
    db_path: str | None
    provider: str
    units: tuple[UnitResult, ...]  # units evaluated by this invocation
    skipped: int = 0  # units already done (by an earlier invocation of the same run)
    failed: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # (unit description, reason)
    shard_dir: str | None = None
    elsewhere: int = 0  # units another live process was running (claimed in the file)

    def describe(self) -> str:
        """One line: the run, where it ran and what this invocation did."""
        where = f"on {self.provider}" if self.provider else "(nothing new evaluated)"
        others = f", {self.elsewhere} left to other processes" if self.elsewhere else ""
        return (
            f"run {self.run_id} {where}: {plural(len(self.units), 'unit')} run, {self.skipped} already done "
            f"(skipped), {len(self.failed)} failed{others}"
        )


def plural(n: int, noun: str) -> str:
    """``1 unit``, ``2 units``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def run(
    config: RunConfig, *, command: str = "run", progress: bool = True, light_start: bool = False
) -> RunResult:
    """Evaluate every unit (checkpoint × dataset) of ``config`` that is not done yet.

    Datasets, checkpoints and the database are validated before any model is exported, so bad input
    fails fast. Re-running the same command continues the same run (its id is a hash of the settings and
    the units' content keys) and skips finished units. A unit that fails does not stop the others; the
    failures are raised together (:class:`UnitsFailedError`) after every other unit is written.

    light_start: when every export is already cached, load tokenizers without importing torch (~4.5 s);
    for a process that exports nothing afterwards (the CLI), since transformers keeps that choice."""
    device = check_run_outputs(config)
    plan = plan_run(config)
    if config.until_separated:  # at least two models to compare, before anything is written
        from sago_fast.run.lockstep import comparison_monitor

        comparison_monitor(plan, config)
    shard = parse_shard(config.shard)
    units = [u for u in plan.units if shard is None or u.index % shard[1] == shard[0]]
    sink = _open_sink(config, plan, command, units, shard is not None)
    finished = sink.finished(plan.run_id, [u.unit_id for u in units])
    todo = [u for u in units if u.unit_id not in finished]
    skipped = len(units) - len(todo)
    writer = _Writer(sink, plan, config, todo, RunProgress.choose(len(units), skipped, progress))
    interrupted = False
    try:  # from here on, a Ctrl-C says what is kept and how to resume
        resume = _committed_chunks(sink, plan, config, todo, skipped, len(units))
        claimer = UnitClaimer(sink, plan, resume, writer.shown.elsewhere)
        lazily = config.executor == "local" and not config.until_separated
        if not lazily:  # Ray tasks and lockstep models start together: their units are claimed now
            todo = [u for u in todo if claimer.claim(u)]
        if light_start and config.executor == "local":
            start_without_torch_if_exported(
                {u.model_id: u.checkpoint for u in todo}.values(), device, config.cache_dir
            )
        work = Work(plan, todo, config, writer.shown, resume, claimer if lazily else None)
        writer.consume(_outcomes(work), resume)
    except KeyboardInterrupt:
        # wherever Ctrl-C lands (a unit, a write, between units): one line saying what is kept
        interrupted = True
        kept_in = config.db if config.shard is None else config.shard_dir
        raise Interrupted(
            f"{len(writer.results) + skipped} of {len(units)} units are finished and kept in {kept_in}, with the "
            "chunks committed of the unit in progress; only the chunk in progress was not written. Run the same "
            "command again to resume."
        ) from None
    finally:
        writer.close(interrupted)
    left, others = writer.left
    if shard is None and config.stats and not writer.failed:
        if left and others:
            log.warning(
                "run %s: %s still to finish in %s; the last process to finish computes the statistics",
                plan.run_id,
                plural(left, "unit"),
                plural(others, "other process"),
            )
        else:
            _statistics(config.db, plan.run_id, fresh=bool(writer.results), n_units=len(units))  # type: ignore[arg-type]
    if shard is None and config.db is not None and not others:
        compact(config.db)  # the chunks' partial states are deleted: give their blocks back to the disk
    result = RunResult(
        plan.run_id,
        None if config.db is None else str(config.db),
        writer.provider,
        tuple(writer.results),
        skipped,
        tuple(writer.failed),
        None if config.shard_dir is None else str(config.shard_dir),
        len(claimer.elsewhere),
    )
    _raise_failures(result, plan, len(units))
    return result


def _open_sink(config: RunConfig, plan: Plan, command: str, units: list[Unit], sharded: bool) -> Sink:
    """The results file (the run's row and its planned units written, this process a worker of it) or the
    shard folder."""
    row = run_row(plan.run_id, command, config.as_json(), config.device, "", "running")
    planned = [
        PlannedUnit(
            u.unit_id,
            u.index,
            str(u.checkpoint.display_path),
            plan.datasets[u.dataset_id].name,
            _planned_examples(plan.datasets[u.dataset_id], config),
        )
        for u in (plan.units if sharded else units)
    ]
    if not sharded:
        return DuckDBSink(config.db, row, planned)  # type: ignore[arg-type]
    return ParquetShardSink(config.shard_dir, row, planned)  # type: ignore[arg-type]


def _committed_chunks(
    sink: Sink, plan: Plan, config: RunConfig, todo: list[Unit], skipped: int, n_units: int
) -> dict[str, ChunksDone]:
    """The chunks earlier invocations committed, of the units to do (and of the finished ones too when
    their values feed comparisons with the units to do); says what is resumed."""
    committed = plan.units if config.until_separated else todo
    resume = {u.unit_id: sink.chunks_done(plan.run_id, u.unit_id) for u in committed}
    resume = {unit_id: done for unit_id, done in resume.items() if done.n_chunks}
    if skipped:
        log.info("run %s: %d of %d units already done, skipped", plan.run_id, skipped, n_units)
    todo_ids = {u.unit_id for u in todo}
    for unit_id, done in resume.items():
        if unit_id in todo_ids:
            log.info(
                "unit %s: resuming after %d committed chunks (%d examples)",
                unit_id,
                done.n_chunks,
                len(done.example_ids),
            )
    return resume


def _planned_examples(data: Dataset, config: RunConfig) -> int:
    """The examples a unit answers at most (a sequential unit may stop before)."""
    n = len(data.examples)
    return min(n, config.budget) if config.budget is not None else n


class _Writer:
    """Writes each outcome as it comes (a chunk: its rows, one transaction; a unit: its finish) and keeps
    what the invocation did: finished units, failures, the execution provider."""

    def __init__(
        self, sink: Sink, plan: Plan, config: RunConfig, todo: list[Unit], shown: RunProgress
    ) -> None:
        self.sink, self.plan, self.config, self.shown = sink, plan, config, shown
        self.by_id = {u.unit_id: u for u in todo}
        self.results: list[UnitResult] = []
        self.failed: list[tuple[str, str]] = []
        self.provider = ""
        self.left = (0, 0)  # after close: (units of the run not done, other processes working on it)
        self.committer = Committer()  # chunk commits go on while the next chunk is computed

    def consume(self, outcomes: Iterator[ChunkOutcome | UnitOutcome], resume: dict[str, ChunksDone]) -> None:
        examples_done: dict[str, int] = {}
        for outcome in outcomes:
            data = self.plan.datasets[outcome.dataset_id]
            where = f"{outcome.checkpoint} × {data.name}"
            if isinstance(outcome, ChunkOutcome):
                before = examples_done.get(outcome.unit_id)
                if before is None:  # resumed units start from their committed chunks (read when claimed)
                    before = len(resume[outcome.unit_id].example_ids) if outcome.unit_id in resume else 0
                examples_done[outcome.unit_id] = before + outcome.n_examples
                total = len(data.examples)
                total = min(total, self.config.budget) if self.config.budget is not None else total  # at most
                shown = partial(
                    self.shown.examples, where, examples_done[outcome.unit_id], total, outcome.unit_id
                )
                self._chunk(outcome, data, where, shown)
            else:
                self._unit(outcome, data, where)

    def _chunk(self, outcome: ChunkOutcome, data: Dataset, where: str, shown: Callable[[], None]) -> None:
        """Build the chunk's rows and hand their commit to the committer; ``shown`` (the progress: these
        examples are committed) follows the commit."""
        run_id, chunk = self.plan.run_id, outcome.records
        rows = build.chunk_rows(
            run_id, outcome.unit_id, data, outcome.model, chunk, self.config.sequential, outcome.comparisons
        )
        write = partial(self.sink.write_chunk, run_id, outcome.unit_id, chunk.index, rows)

        def commit() -> None:
            _write(self.sink, where, write)
            shown()
            say_committed(data.name, outcome.comparisons)

        self.committer.submit(commit)

    def _unit(self, outcome: UnitOutcome, data: Dataset, where: str) -> None:
        self.committer.drain()  # the unit's chunks are in the file before it is finished or released
        if outcome.end is None:
            self.failed.append((where, outcome.error or "unknown error"))
            log.error("unit %s failed: %s", where, outcome.error)
            self.sink.release(self.plan.run_id, outcome.unit_id, "failed", outcome.error)
        else:
            unit = self.by_id[outcome.unit_id]
            self.results.append(_finish(self.sink, self.plan.run_id, unit, data, outcome, where))
            self.provider = outcome.end.model.provider or self.provider
            log.info("unit %s done in %.1fs", where, outcome.seconds)
        self.shown.unit_finished(where, outcome.error, outcome.seconds, outcome.unit_id)

    def close(self, interrupted: bool) -> None:
        """Record how the run ended ("unscored": every unit is done and the statistics are still to come,
        or left to `sago stats`) and close the sink."""
        try:  # what was computed is kept, a Ctrl-C included
            self.committer.close()
        except Exception as exc:  # an error is already on its way (or this one was raised before)
            log.warning("could not commit the last chunks of run %s: %s", self.plan.run_id, exc)
        self.shown.close()
        complete = not self.failed and len(self.results) == len(self.by_id)  # the file may say more
        status = "interrupted" if interrupted else "unscored" if complete else "failed"
        try:
            self.left = self.sink.finish(self.plan.run_id, status, self.provider)
        except Exception as exc:  # e.g. the disk is still full: the error already on its way says so
            log.warning("could not record the status of run %s: %s", self.plan.run_id, exc)
        finally:
            self.sink.close()


def _raise_failures(result: RunResult, plan: Plan, n_units: int) -> None:
    """:class:`UnitsFailedError` when units failed or training-run members were skipped (the others are
    written, and their statistics computed)."""
    if result.failed:
        failed = result.failed
        reasons = "; ".join(f"{where}: {reason}" for where, reason in failed[:3])
        more = f" (and {len(failed) - 3} more)" if len(failed) > 3 else ""
        kept = len(result.units) + result.skipped
        raise UnitsFailedError(
            f"{len(failed)} of {n_units} units failed (the {kept} others are kept): {reasons}{more}", result
        )
    if plan.skipped:
        where, why = plan.skipped[0]
        more = f" (and {len(plan.skipped) - 1} more)" if len(plan.skipped) > 1 else ""
        raise UnitsFailedError(
            f"{len(plan.skipped)} training-run member(s) skipped, the others are kept: {where}: {why}{more}",
            result,
        )


def _statistics(db: Any, run_id: str, *, fresh: bool, n_units: int) -> None:
    """The run's statistics (``sago stats``), unless it has them and nothing new was evaluated; the run is
    ``done`` after them. A Ctrl-C here keeps every unit, leaves the run ``unscored`` and says how to finish."""
    from sago_fast.stats import run_stats

    try:
        if fresh or not _has_stats(db, run_id):
            log.info("computing statistics of run %s", run_id)
            run_stats(db, run_id)
        else:
            with Store(db) as store:
                store.set_run_status(run_id, "done")
    except KeyboardInterrupt:
        raise Interrupted(
            f"all {n_units} units of run {run_id} are finished and kept in {db}; its statistics were not "
            f"written (the run is marked unscored): run `sago stats --db {db}` to compute them"
        ) from None


def check_run_outputs(config: RunConfig) -> str:
    """Before any work, in one line naming the setting: the device runs (returned resolved), the results
    file (a name DuckDB opens, a file that can be written) or shard folder, and the caches
    (:func:`sago_fast.paths.check_cache_writable`)."""
    from sago_fast.atomic import check_writable
    from sago_fast.paths import check_cache_writable
    from sago_fast.runtime.session import check_device
    from sago_fast.store.store import check_db_name

    device = check_device(config.device)
    check_cache_writable(config.cache_dir)  # the export cache and the cache root
    if config.shard is not None and config.shard_dir is not None:
        check_writable(config.shard_dir, what="--shard-dir", directory=True)
    elif config.db is not None:
        check_db_name(config.db)
        check_writable(config.db, what="--db")
    return device


def _has_stats(db: Any, run_id: str) -> bool:
    """Whether the run already has statistics (a re-run that evaluated nothing new keeps them)."""
    with Store(db, read_only=True) as store:
        return store.has_stats(run_id)


def _outcomes(work: Work) -> Iterator[ChunkOutcome | UnitOutcome]:
    """The units' outcomes: the compared models in lockstep (``--until-separated``), else the executor's."""
    config = work.config
    if config.until_separated:
        from sago_fast.run.lockstep import lockstep_outcomes

        return lockstep_outcomes(work)
    return EXECUTORS.get(config.executor)(work)


def _finish(
    sink: Sink, run_id: str, unit: Unit, data: Dataset, outcome: UnitOutcome, where: str
) -> UnitResult:
    """Finish a unit whose chunks are all committed: the dataset scorers' rows from the committed chunks'
    partial states, and the done mark."""
    end = outcome.end
    assert end is not None
    chunks = sink.chunks_done(run_id, unit.unit_id)
    names = DATASET_SCORERS.names()
    partials = [unpack_partials(state, names) for state in sink.chunk_states(run_id, unit.unit_id)]
    rows = build.finish_rows(
        run_id, unit.unit_id, unit.shard, data, end, finish_unit(end.context, partials), chunks
    )
    rows["units"] |= {"design": [unit.design.name], "families_per_item": [unit.design.families_per_item]}
    _write(sink, where, partial(sink.write, run_id, unit.unit_id, rows))
    return UnitResult(
        end.model.model_id,
        outcome.checkpoint,
        outcome.dataset_id,
        end.n_examples,
        end.n_variants,
        float(rows["units"]["accuracy"][0]),
        outcome.seconds,
    )


def _write(sink: Sink, where: str, write: Callable[[], bool]) -> None:
    try:
        write()
    except Exception as exc:
        if is_disk_full(exc):
            raise DiskFullError(
                f"the disk is full (writing {where} to {sink.where}): that chunk was rolled back and the chunks "
                "and units before it are kept; free some space and run the same command again to finish"
            ) from None
        raise
