"""What a results file holds and what is running on it: its runs, the processes writing them, each unit's
state and the examples done, with an estimate of the time left (``sago status``, :func:`run_status`).

Read in one short visit to the file, so it works while runs write it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from datetime import datetime

from sago_fast import defaults
from sago_fast.store.liveness import dead_reason, utc_now
from sago_fast.store.store import Store


@dataclass(frozen=True)
class WorkerStatus:
    """A process that wrote (or writes) a run: alive or why not, and seconds since its last heartbeat."""

    host: str
    pid: int
    command: str
    state: str  # working | finished | interrupted
    alive: bool
    dead_because: str
    heartbeat_s_ago: float
    started_at: datetime | None


@dataclass(frozen=True)
class UnitStatus:
    """A planned unit: ``state`` is done, claimed (``by`` a process), waiting, failed (``error``),
    stopped (a sequential unit done early: ``stop_reason``) or not merged (a merged file's unit whose
    shard is not in it); chunks and examples committed so far."""

    position: int
    checkpoint: str
    dataset: str
    state: str
    by: str
    chunks: int
    examples_done: int
    examples_planned: int
    stop_reason: str | None
    error: str | None
    takeovers: int


@dataclass(frozen=True)
class RunStatus:
    """One run of the file. ``eta_s``: seconds left at the rate its live processes have committed examples
    since they started, wall-clock (exports, unit ends and every process's share included); None when
    nothing is running, nothing is measured yet, or the run is sequential (``eta_note`` says why)."""

    run_id: str
    status: str
    created_at: datetime | None
    command: str
    workers: tuple[WorkerStatus, ...]
    units: tuple[UnitStatus, ...]
    eta_s: float | None
    eta_note: str = ""

    @property
    def examples_done(self) -> int:
        return sum(u.examples_done for u in self.units)

    @property
    def examples_planned(self) -> int:
        return sum(u.examples_planned for u in self.units)

    def count(self, state: str) -> int:
        return sum(u.state == state for u in self.units)


_UNITS = """
    SELECT r.position, r.checkpoint, r.dataset, r.state, r.worker_id, r.n_examples, r.error, r.takeovers,
           u.status AS done, u.stop_reason, u.n_examples AS n_done, u.n_chunks AS chunks_done,
           c.n_chunks, c.n_examples AS ex_committed
    FROM run_units r
    LEFT JOIN units u ON u.run_id = r.run_id AND u.unit_id = r.unit_id
    LEFT JOIN (SELECT run_id, unit_id, count(*) AS n_chunks, sum(n_examples) AS n_examples
               FROM unit_chunks GROUP BY run_id, unit_id) c ON c.run_id = r.run_id AND c.unit_id = r.unit_id
    WHERE r.run_id = $run ORDER BY r.position
"""


def run_status(
    db: str | os.PathLike[str], run_id: str | None = None, stale_after_s: float = defaults.STALE_AFTER_S
) -> list[RunStatus]:
    """Every run of the results file ``db`` (or only ``run_id``), newest first, as it stands now."""
    with Store(db, read_only=True) as store:
        _, runs = store.query(
            "SELECT run_id, status, created_at, command, config_json FROM runs "
            "WHERE $run IS NULL OR run_id = $run ORDER BY created_at DESC",
            {"run": run_id},
        )
        found = []
        for rid, status, created, command, config_json in runs:
            _, workers = store.query(
                "SELECT worker_id, host, pid, state, heartbeat_at, command, started_at FROM workers "
                "WHERE run_id = $run ORDER BY started_at",
                {"run": rid},
            )
            _, units = store.query(_UNITS, {"run": rid})
            _, chunks = store.query(
                "SELECT finished_at, n_examples FROM unit_chunks WHERE run_id = $run AND finished_at IS NOT NULL",
                {"run": rid},
            )
            run = _status(rid, status, created, command, workers, units, stale_after_s)
            found.append(_with_time_left(run, workers, chunks, _sequential(config_json)))
    return found


def _status(run_id, status, created, command, worker_rows, unit_rows, stale_after_s) -> RunStatus:  # type: ignore[no-untyped-def]
    now = utc_now()
    workers, names = [], {}
    for worker_id, host, pid, state, heartbeat, cmd, started in worker_rows:
        why = dead_reason(worker_id, host, pid, state, heartbeat, stale_after_s, now)
        ago = (now - heartbeat).total_seconds() if heartbeat is not None else float("nan")
        workers.append(WorkerStatus(host, int(pid), cmd or "", state, not why, why, ago, started))
        names[worker_id] = f"PID {pid}"
    units = []
    for row in unit_rows:
        (position, checkpoint, dataset, state, worker_id, planned, error, takeovers, done, stop_reason,
         n_done, chunks_done, n_chunks, committed) = row  # fmt: skip
        if done == "done":
            state = "stopped" if stop_reason else "done"
            examples, chunks = int(n_done or 0), int(chunks_done or n_chunks or 0)
        else:
            examples, chunks = int(committed or 0), int(n_chunks or 0)
        units.append(
            UnitStatus(
                int(position),
                checkpoint,
                dataset,
                state,
                names.get(worker_id, "") if state == "claimed" else "",
                chunks,
                examples,
                int(planned or 0),
                stop_reason,
                error,
                int(takeovers or 0),
            )
        )
    live = sum(w.alive and w.state == "working" for w in workers)
    killed = [w for w in workers if w.state == "working" and not w.alive]
    if status == "running" and killed and not live:  # SIGKILL, power: nobody could record it
        status = f"interrupted ({killed[-1].dead_because})"
    return RunStatus(run_id, status, created, command or "", tuple(workers), tuple(units), None)


SAY_UNDER_S = 60.0  # a time left below this is said as "under a minute"


def _sequential(config_json: str | None) -> bool:
    """Whether the run's units stop on their own (``--precision``, ``--budget``, ``--until-separated``)."""
    config = json.loads(config_json or "{}")
    return any(config.get(name) for name in ("precision", "budget", "until_separated"))


def _with_time_left(
    run: RunStatus, worker_rows: list[tuple], chunk_rows: list[tuple], sequential: bool
) -> RunStatus:
    """``run`` with its time left: the examples still planned at the rate the live processes committed
    examples from the first of them starting to their last commit (wall-clock: a unit's export and end,
    and the processes working side by side, are in it), less the time the current chunks have run since
    that commit; or a note saying why there is none."""
    live = [w for w in run.workers if w.alive and w.state == "working"]
    if not live:
        return run
    if sequential:
        note = "time left unknown: a sequential unit stops once its figures are known"
        return replace(run, eta_note=note)
    running = {(w.host, w.pid) for w in live}
    started = [row[6] for row in worker_rows if row[6] is not None and (row[1], int(row[2])) in running]
    since = min(started) if started else None
    mine = [(finished, int(n or 0)) for finished, n in chunk_rows if since is None or finished >= since]
    done = sum(n for _, n in mine)
    if not done or since is None:
        return replace(run, eta_note="time left: known after the first chunk")
    left = sum(
        max(0, u.examples_planned - u.examples_done) for u in run.units if u.state in ("claimed", "waiting")
    )
    if not left:
        return replace(run, eta_note="every example done: finishing (statistics)")
    last = max(finished for finished, _ in mine)
    per_example = max((last - since).total_seconds(), 1e-3) / done
    eta = left * per_example - (utc_now() - last).total_seconds()
    if eta <= 0:
        return replace(
            run, eta_note="time left: any moment now (the current chunks run over the rate so far)"
        )
    if eta < SAY_UNDER_S:  # the run's end (its statistics) is not in the rate: no false precision
        return replace(run, eta_note="under a minute left")
    return replace(run, eta_s=eta)
