"""Many ``sago run`` processes on one results file: each unit is claimed in the file before it runs.

Every process that writes a run has a row in ``workers`` (host, pid, command, a heartbeat every
``heartbeat_s`` from a background thread), and every planned unit of the run a row in ``run_units``
(``waiting``, ``claimed`` by a worker, ``done`` or ``failed``). A process claims a unit in one transaction
before it evaluates it, so no unit is evaluated by two live processes. A claim whose worker is dead (its
process is gone from this host, or it has had no heartbeat for ``stale_after_s``) is taken over, named
in a warning, and the unit resumes after its committed chunks. Were a taken-over process only slow, its
later commits of the same chunks are refused by the file (:meth:`~sago_fast.store.Store.write_chunk`), so
rows are never written twice.

Claims rely on the file's lock, which is only reliable on one machine: across machines, use shards and
``sago merge``.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sago_fast import defaults
from sago_fast.store.liveness import dead_reason, start_ticks, utc_now
from sago_fast.store.shared import SharedFile
from sago_fast.store.store import ChunksDone, Store

if TYPE_CHECKING:
    from sago_fast.run.plan import Plan, Unit

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Worker:
    """One process writing a run: ``worker_id`` is ``host:pid:start``."""

    worker_id: str
    host: str
    pid: int
    command: str

    @classmethod
    def this_process(cls) -> Worker:
        host, pid = socket.gethostname(), os.getpid()
        start = start_ticks(pid) or str(time.time_ns())
        command = (
            " ".join(["sago", *sys.argv[1:]])
            if sys.argv and sys.argv[0].endswith("sago")
            else " ".join(sys.argv)
        )
        return cls(f"{host}:{pid}:{start}", host, pid, command[:500])


@dataclass(frozen=True)
class ClaimSettings:
    """heartbeat_s: how often a worker records that it is alive; stale_after_s: a worker without a
    heartbeat for this long is dead, and its claims are taken over."""

    heartbeat_s: float = defaults.HEARTBEAT_S
    stale_after_s: float = defaults.STALE_AFTER_S


@dataclass(frozen=True)
class PlannedUnit:
    """A planned unit as ``run_units`` records it."""

    unit_id: str
    position: int
    checkpoint: str
    dataset: str
    n_examples: int


def record_planned(store: Store, run_id: str, units: Sequence[PlannedUnit], state: str = "waiting") -> None:
    """The planned units' ``run_units`` rows (those not yet there) in ``state``, in ``store``'s open
    transaction; those finished in the file are marked done."""
    store.insert(
        "run_units",
        {
            "run_id": [run_id] * len(units),
            "unit_id": [u.unit_id for u in units],
            "position": [u.position for u in units],
            "checkpoint": [u.checkpoint for u in units],
            "dataset": [u.dataset for u in units],
            "n_examples": [u.n_examples for u in units],
            "state": [state] * len(units),
            "takeovers": [0] * len(units),
        },
        key=("run_id", "unit_id"),
    )
    store.query(
        """UPDATE run_units SET state = 'done' WHERE run_id = $run AND state <> 'done'
           AND unit_id IN (SELECT unit_id FROM units WHERE run_id = $run AND status = 'done')""",
        {"run": run_id},
    )


@dataclass(frozen=True)
class Claim:
    """The answer to a claim: ``mine`` (this worker has it now), else ``done`` or ``held`` (by
    ``holder``, a live worker described in words); ``took_over``: the dead worker it was taken from."""

    state: str
    holder: str = ""
    took_over: str = ""

    @property
    def mine(self) -> bool:
        return self.state == "mine"


_LIVE_WORKERS = """
    SELECT worker_id, host, pid, state, heartbeat_at FROM workers WHERE run_id = $run
"""
_WORKERS_OF_HOST = """
    SELECT worker_id, host, pid, state, heartbeat_at FROM workers WHERE host = $host AND worker_id <> $me
"""


class Claims:
    """This process's claims on the units of ``run_id`` in ``file``, and its heartbeat."""

    def __init__(
        self,
        file: SharedFile,
        run_id: str,
        worker: Worker | None = None,
        settings: ClaimSettings = ClaimSettings(),
    ) -> None:
        self.file, self.run_id, self.settings = file, run_id, settings
        self.worker = worker or Worker.this_process()
        self.started = utc_now()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------------
    def register(self, store: Store, units: Sequence[PlannedUnit]) -> None:
        """This worker's row and the planned units' rows (those not yet there), in ``store``'s open
        transaction."""
        w = self.worker
        store.query(
            "INSERT INTO workers VALUES ($id, $run, $host, $pid, $command, $now, $now, 'working')",
            {
                "id": w.worker_id,
                "run": self.run_id,
                "host": w.host,
                "pid": w.pid,
                "command": w.command,
                "now": self.started,
            },
        )
        record_planned(store, self.run_id, units)

    def start_heartbeat(self) -> None:
        """Record every ``heartbeat_s`` that this worker is alive (a daemon thread, until :meth:`finish`)."""
        if self._beat is None:
            self._beat = threading.Thread(target=self._heartbeat, name="sago-heartbeat", daemon=True)
            self._beat.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.settings.heartbeat_s):
            try:
                with self.file.step() as store:
                    store.query(
                        "UPDATE workers SET heartbeat_at = $now WHERE worker_id = $id AND run_id = $run",
                        {"now": utc_now(), "id": self.worker.worker_id, "run": self.run_id},
                    )
            except (
                Exception
            ) as exc:  # a missed beat is not an error of the run; a long one shows in `sago status`
                log.warning("could not record the heartbeat of PID %d: %s", self.worker.pid, exc)

    def stop(self) -> None:
        """Stop the heartbeat (waiting for a beat in progress)."""
        self._stop.set()
        if self._beat is not None and self._beat is not threading.current_thread():
            self._beat.join(timeout=self.settings.heartbeat_s + 1)

    def finish(self, store: Store, state: str) -> None:
        """The worker is ``state`` (``finished``, ``interrupted``) and its claims on units it did not
        finish go back to ``waiting``, in ``store``. Call :meth:`stop` first: ``store`` holds this process's
        turn on the file, which the heartbeat waits for."""
        store.query(
            "UPDATE workers SET state = $state, heartbeat_at = $now WHERE worker_id = $id AND run_id = $run",
            {"state": state, "now": utc_now(), "id": self.worker.worker_id, "run": self.run_id},
        )
        store.query(
            "UPDATE run_units SET state = 'waiting' WHERE run_id = $run AND worker_id = $id AND state = 'claimed'",
            {"run": self.run_id, "id": self.worker.worker_id},
        )

    # -- claims ---------------------------------------------------------------------------------------
    def _alive(self, store: Store, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """The worker rows (worker_id, host, pid, state, heartbeat_at) ``sql`` selects whose process lives."""
        _, rows = store.query(sql, params)
        now, stale = utc_now(), self.settings.stale_after_s
        return [
            (worker_id, host, pid, state, heartbeat)
            for worker_id, host, pid, state, heartbeat in rows
            if not dead_reason(worker_id, host, pid, state, heartbeat, stale, now)
        ]

    def live_workers(self, store: Store) -> dict[str, str]:
        """The run's live workers: worker id -> "PID n on HOST"."""
        rows = self._alive(store, _LIVE_WORKERS, {"run": self.run_id})
        return {worker_id: f"PID {pid} on {host}" for worker_id, host, pid, _, _ in rows}

    def others_here(self, store: Store) -> bool:
        """Whether another live process of this machine writes the file (any run): they share its cores."""
        me = {"host": self.worker.host, "me": self.worker.worker_id}
        return bool(self._alive(store, _WORKERS_OF_HOST, me))

    def held_elsewhere(self, store: Store, unit_ids: Sequence[str]) -> bool:
        """Whether another live worker holds a claim on any of ``unit_ids``."""
        _, rows = store.query(
            "SELECT DISTINCT worker_id FROM run_units WHERE run_id = $run AND state = 'claimed' "
            "AND list_contains($units, unit_id)",
            {"run": self.run_id, "units": list(unit_ids)},
        )
        holders = {r[0] for r in rows} - {self.worker.worker_id}
        return bool(holders & set(self.live_workers(store)))

    def claim(self, store: Store, unit_id: str) -> Claim:
        """Claim ``unit_id`` for this worker, in one transaction on ``store``."""
        with store.transaction():
            _, rows = store.query(
                """SELECT r.state, r.worker_id, r.claimed_at, w.host, w.pid, w.state, w.heartbeat_at,
                          (SELECT count(*) FROM units u WHERE u.run_id = r.run_id AND u.unit_id = r.unit_id
                                                        AND u.status = 'done')
                   FROM run_units r LEFT JOIN workers w ON w.worker_id = r.worker_id AND w.run_id = r.run_id
                   WHERE r.run_id = $run AND r.unit_id = $unit""",
                {"run": self.run_id, "unit": unit_id},
            )
            if not rows:
                raise KeyError(f"unit {unit_id} is not planned in run {self.run_id}")
            state, holder_id, claimed_at, host, pid, w_state, heartbeat, done = rows[0]
            if done or state == "done":
                return Claim("done")
            me = self.worker.worker_id
            took_over = ""
            if state == "claimed" and holder_id != me:
                why = dead_reason(holder_id, host, pid, w_state, heartbeat, self.settings.stale_after_s)
                if not why:
                    return Claim("held", f"PID {pid} on {host}")
                took_over = f"PID {pid} on {host} ({why})"
            if (
                state == "failed"
                and claimed_at is not None
                and claimed_at >= self.started
                and holder_id != me
            ):
                return Claim(
                    "held", "failed in another process during this run"
                )  # a later invocation retries it
            store.query(
                """UPDATE run_units SET state = 'claimed', worker_id = $me, claimed_at = $now, error = NULL,
                          takeovers = takeovers + $took WHERE run_id = $run AND unit_id = $unit""",
                {
                    "me": me,
                    "now": utc_now(),
                    "took": int(bool(took_over)),
                    "run": self.run_id,
                    "unit": unit_id,
                },
            )
        return Claim("mine", took_over=took_over)

    def release(self, store: Store, unit_id: str, state: str, error: str | None = None) -> None:
        """This worker's claim on ``unit_id`` ends: ``done``, ``failed`` (with ``error``) or ``waiting``."""
        store.query(
            """UPDATE run_units SET state = $state, error = $error, claimed_at = $now
               WHERE run_id = $run AND unit_id = $unit AND worker_id = $me""",
            {
                "state": state,
                "error": error,
                "now": utc_now(),
                "run": self.run_id,
                "unit": unit_id,
                "me": self.worker.worker_id,
            },
        )


class ClaimingSink(Protocol):
    """What claiming units needs of where a run's rows go (:class:`~sago_fast.run.sinks.Sink` is one)."""

    def chunks_done(self, run_id: str, unit_id: str) -> ChunksDone:
        """The chunks of an unfinished unit already committed."""

    def claim(self, run_id: str, unit_id: str) -> Claim:
        """Claim a unit for this process before it is evaluated."""

    def held_elsewhere(self, run_id: str, unit_ids: Sequence[str]) -> bool:
        """Whether another live process holds any of these units."""

    def shares_cores(self) -> bool:
        """Whether another live process of this machine writes the same results (any run)."""


class Claimer(Protocol):
    """Claims units one at a time, as an executor reaches them (:class:`UnitClaimer`)."""

    def claim(self, unit: Unit) -> bool:
        """Whether this process may evaluate ``unit`` now (claimed in the results file for it)."""

    def busy(self, units: list[Unit]) -> bool:
        """Whether another process is working on some of ``units``."""

    def shares_cores(self) -> bool:
        """Whether another process of this machine writes the same results file now."""


class UnitClaimer:
    """Claims each unit in the results file before it is evaluated (:mod:`sago_fast.run.claims`): a unit
    another live process holds, or has finished, is left to it (and counted as done in the progress); a
    unit taken over from a dead process resumes after the chunks it committed."""

    def __init__(
        self,
        sink: ClaimingSink,
        plan: Plan,
        resume: dict[str, ChunksDone],
        on_elsewhere: Callable[[str, str, str], None],
    ) -> None:
        """``resume`` gains the committed chunks of each unit claimed; ``on_elsewhere(where, why, unit id)``
        hears of each unit left to another process."""
        self.sink, self.plan, self.resume, self.on_elsewhere = sink, plan, resume, on_elsewhere
        self.elsewhere: list[str] = []

    def claim(self, unit: Unit) -> bool:
        claim = self.sink.claim(self.plan.run_id, unit.unit_id)
        where = f"{unit.checkpoint.display_path} × {self.plan.datasets[unit.dataset_id].name}"
        if not claim.mine:
            why = "done by another process" if claim.state == "done" else f"running in {claim.holder}"
            log.info("unit %s: %s, left to it", where, why)
            self.elsewhere.append(unit.unit_id)
            self.on_elsewhere(where, why, unit.unit_id)
            return False
        done = self.sink.chunks_done(self.plan.run_id, unit.unit_id)
        if done.n_chunks:
            self.resume[unit.unit_id] = done
        if claim.took_over:
            log.warning(
                "unit %s: taking over the claim of %s; resuming after %d committed chunks",
                where,
                claim.took_over,
                done.n_chunks,
            )
        return True

    def busy(self, units: list[Unit]) -> bool:
        """Whether another live process holds a unit of ``units`` (a checkpoint's: this one starts
        elsewhere, so that two processes load different models)."""
        return self.sink.held_elsewhere(self.plan.run_id, [u.unit_id for u in units])

    def shares_cores(self) -> bool:
        """Whether another process of this machine writes the same results file now."""
        return self.sink.shares_cores()
