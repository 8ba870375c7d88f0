"""Chunk commits behind the run: the next chunk is computed while the last one waits for the results file.

A results file shared with other processes (:mod:`sago_fast.store.shared`) is held by one of them at a
time, for up to ~2 s. A run that committed each chunk in its own thread would stop computing for as long
as another writer holds the file; so a run hands each chunk's commit to one committer thread and goes on.
The committer runs the commits in the order they were given, one at a time.

- At most ``pending`` commits wait at once (default :data:`PENDING_COMMITS`): a run that gets ahead of
  its file waits for room, so the memory held by waiting chunks is bounded.
- The first commit that fails stops the committer: the commits given after it are dropped (a chunk is
  never committed after a chunk of the same unit that was not), and its error is raised, as it was, by
  the next call to :meth:`submit`, :meth:`drain` or :meth:`close`.
- :meth:`drain` waits until every commit given so far is done: before a unit is finished from its
  committed chunks, and at the end of the run (a Ctrl-C included, so that what was computed is kept).

A chunk whose commit was still waiting when its process was killed is simply not in the file: like a chunk
being computed, it is computed again when the unit is resumed.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

PENDING_COMMITS = 8  # commits that may wait for the file at once (a run then waits for room)


class Committer:
    """Runs ``submit``-ted commits in one thread, in order (see the module docstring)."""

    def __init__(self, pending: int = PENDING_COMMITS) -> None:
        if pending < 1:
            raise ValueError(f"pending must be >= 1, not {pending}")
        self._jobs: queue.Queue[Callable[[], Any] | None] = queue.Queue(maxsize=pending)
        self._failed: BaseException | None = None  # the commit that failed: later ones are dropped
        self._reported = False  # whether the run's thread has raised it
        self._thread = threading.Thread(target=self._work, name="sago-commit", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                if self._failed is None:
                    job()
            except BaseException as exc:  # kept for the run's thread, which raises it
                self._failed = exc
            finally:
                self._jobs.task_done()

    def submit(self, commit: Callable[[], Any]) -> None:
        """Queue ``commit`` (waiting while ``pending`` others wait); raises the error of an earlier one."""
        self._raise_if_failed()
        self._jobs.put(commit)

    def drain(self) -> None:
        """Wait for every commit given so far; raises the first that failed."""
        self._jobs.join()
        self._raise_if_failed()

    def close(self) -> None:
        """Wait for the commits given so far, then stop the thread; raises the first that failed."""
        try:
            self.drain()
        finally:
            if self._thread.is_alive():
                self._jobs.put(None)
                self._thread.join()

    def _raise_if_failed(self) -> None:
        if self._failed is not None and not self._reported:
            self._reported = True
            raise self._failed
