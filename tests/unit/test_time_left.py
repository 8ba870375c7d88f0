"""``sago status``'s time left: the examples still planned at the wall-clock rate the live processes have
committed examples since they started; none for a sequential run, or before the first chunk."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sago_fast.store.liveness import utc_now
from sago_fast.store.status import RunStatus, UnitStatus, WorkerStatus, _with_time_left


def _run(started) -> tuple[RunStatus, list[tuple]]:
    worker = WorkerStatus("host", 41, "sago run", "working", True, "", 1.0, started)
    units = (
        UnitStatus(1, "ckpt-a", "mmlu", "done", "", 2, 100, 100, None, None, 0),
        UnitStatus(2, "ckpt-b", "mmlu", "claimed", "PID 41", 1, 50, 100, None, None, 0),
        UnitStatus(3, "ckpt-c", "mmlu", "waiting", "", 0, 0, 100, None, None, 0),
    )
    rows = [("w1", "host", 41, "working", utc_now(), "sago run", started)]
    return RunStatus("r", "running", started, "sago run", (worker,), units, None), rows


def test_time_left_is_the_wall_clock_rate_since_the_live_processes_started():
    started = utc_now() - timedelta(seconds=100)
    run, workers = _run(started)
    chunks = [
        (started - timedelta(seconds=30), 100),  # an earlier process's chunk: not this process's rate
        (started + timedelta(seconds=40), 25),
        (started + timedelta(seconds=90), 25),
    ]
    left = _with_time_left(run, workers, chunks, sequential=False)
    # 50 examples in ~100 s, 150 left (50 of ckpt-b, 100 of ckpt-c): ~300 s
    assert left.eta_s == pytest.approx(300, rel=0.05)


def test_no_time_left_before_the_first_chunk_nor_for_a_sequential_run():
    started = utc_now() - timedelta(seconds=100)
    run, workers = _run(started)
    early = _with_time_left(run, workers, [(started - timedelta(seconds=5), 100)], sequential=False)
    assert early.eta_s is None and "after the first chunk" in early.eta_note
    chunks = [(started + timedelta(seconds=40), 25)]
    sequential = _with_time_left(run, workers, chunks, sequential=True)
    assert sequential.eta_s is None and "sequential" in sequential.eta_note
    stopped = RunStatus("r", "done", started, "sago run", (), run.units, None)
    assert _with_time_left(stopped, [], chunks, sequential=False) == stopped
