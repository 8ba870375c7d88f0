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
    # 50 examples in the 90 s to the last commit, 150 left (50 of ckpt-b, 100 of ckpt-c): 270 s from that
    # commit, which was 10 s ago
    assert left.eta_s == pytest.approx(260, abs=2)
    # no commit for a while: the time left counts down rather than growing as the rate would fall
    later = [(started - timedelta(seconds=30), 100), (started + timedelta(seconds=50), 25), (started, 25)]
    counted_down = _with_time_left(run, workers, later, sequential=False)
    assert counted_down.eta_s == pytest.approx(150 * 50 / 50 - 50, abs=2)
    # running over the rate so far, or every example done: said, not a time
    stuck = [(started - timedelta(seconds=30), 100), (started + timedelta(seconds=1), 50)]
    assert "any moment" in _with_time_left(run, workers, stuck, sequential=False).eta_note
    soon = [(started - timedelta(seconds=30), 100), (started + timedelta(seconds=50), 140)]
    assert _with_time_left(run, workers, soon, sequential=False).eta_note == "under a minute left"
    finished = RunStatus("r", "running", started, "sago run", run.workers, run.units[:1], None)
    assert "finishing" in _with_time_left(finished, workers, chunks, sequential=False).eta_note


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
