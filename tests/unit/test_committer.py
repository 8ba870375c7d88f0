"""The committer runs chunk commits in order behind the run, bounded, and stops at the first failure."""

from __future__ import annotations

import threading

import pytest

from sago_fast.run.committer import Committer


def test_commits_run_in_the_order_given_and_drain_waits_for_them() -> None:
    done: list[int] = []
    gate = threading.Event()
    committer = Committer(pending=16)
    committer.submit(gate.wait)  # the file is held elsewhere: the commits wait behind it
    for i in range(10):
        committer.submit(lambda i=i: done.append(i))
    assert done == []  # the run went on without waiting
    gate.set()
    committer.drain()
    assert done == list(range(10))
    committer.close()


def test_a_run_ahead_of_its_file_waits_for_room() -> None:
    gate, started = threading.Event(), threading.Event()
    committer = Committer(pending=2)
    committer.submit(lambda: (started.set(), gate.wait()))
    assert started.wait(5.0)  # taken by the thread: the queue is empty again
    committer.submit(lambda: None)
    committer.submit(lambda: None)  # two wait: the queue is full
    submitted = threading.Event()
    extra = threading.Thread(target=lambda: (committer.submit(lambda: None), submitted.set()))
    extra.start()
    assert not submitted.wait(0.3)  # blocked until a commit is done
    gate.set()
    assert submitted.wait(5.0)
    extra.join()
    committer.close()


def test_the_first_failure_drops_later_commits_and_is_raised_once() -> None:
    done: list[int] = []
    gate = threading.Event()
    committer = Committer(pending=8)
    committer.submit(gate.wait)
    committer.submit(lambda: done.append(0))
    committer.submit(lambda: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    committer.submit(lambda: done.append(2))  # a later chunk of the same unit: never committed
    gate.set()
    with pytest.raises(OSError, match="No space left"):
        committer.drain()
    assert done == [0]
    committer.submit(lambda: done.append(3))  # reported already: dropped, not raised again
    committer.close()
    assert done == [0]


def test_close_raises_a_failure_not_yet_reported() -> None:
    committer = Committer()
    committer.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        committer.close()


def test_pending_must_be_positive() -> None:
    with pytest.raises(ValueError, match="pending must be >= 1"):
        Committer(pending=0)
