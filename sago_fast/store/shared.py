"""A results file that many processes write and read: a writer holds it between its steps only until
another process asks for it.

Opening and closing a DuckDB file costs ~80 ms (closing checkpoints the write-ahead log into the file),
more than a chunk's commit itself. So a writer keeps the file open after a step, and lets it go
(closing it, which checkpoints) as soon as another process asks: an opener that finds the file held
touches ``<file>.wanted`` while it waits (:func:`~sago_fast.store.locking.connect_waiting`), and a thread
of the holder that looks every ``RELEASE_POLL_S`` closes the file when that request is fresh and it has
held the file for ``HOLD_AT_LEAST_S``, then gives way for ``GIVE_WAY_S`` before it opens the file again.
So a writer pays one open and close (~80 ms) per ``HOLD_AT_LEAST_S`` at most, however often others ask
(<= 4%), and an opener waits ~2 s at most for a writer's turn. The file is also let go after
``IDLE_RELEASE_S`` without a step, so a request that could not be made (a folder the reader cannot
write) is answered too. Within one process the threads that write (a run's commits
and its heartbeat) take turns on one lock.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sago_fast.store.locking import release_requested
from sago_fast.store.store import Store

SINK_MEMORY_LIMIT = "1GB"  # DuckDB's buffer pool while a step writes
RELEASE_POLL_S = 0.05  # how often a holder looks for a request for its file
HOLD_AT_LEAST_S = 2.0  # a holder with steps to do keeps the file this long before it lets go when asked
IDLE_RELEASE_S = 2.0  # a file held without a step for this long is let go anyway
GIVE_WAY_S = 0.3  # after letting go when asked, a holder waits this long before opening the file again


class SharedFile:
    """The results file ``path``, opened read-write for steps (``wait``: seconds to wait for another
    process, None for ``$SAGO_DB_WAIT`` or the writer's default). Call :meth:`close` at the end."""

    def __init__(self, path: str | os.PathLike[str], wait: float | None = None) -> None:
        self.path = str(path)
        self.wait = wait
        self._turn = threading.Lock()
        self._store: Store | None = None
        self._last_step = 0.0
        self._opened_at = 0.0
        self._reopen_after = 0.0  # give way until then (monotonic seconds)
        self._closed = threading.Event()
        self._watcher: threading.Thread | None = None

    @contextmanager
    def step(self) -> Iterator[Store]:
        """The file, open for one step (opened if this process had let it go)."""
        with self._turn:
            if self._store is None:
                time.sleep(max(0.0, self._reopen_after - time.monotonic()))
                store = Store(self.path, wait=self.wait)
                try:
                    # DuckDB keeps the pages it wrote in its buffer pool up to 80% of RAM by default
                    store.query(f"SET memory_limit = '{SINK_MEMORY_LIMIT}'")
                except BaseException:
                    store.close()
                    raise
                self._store = store
                self._opened_at = time.monotonic()
                self._watch()
            try:
                yield self._store
            except BaseException:
                self._let_go()  # an error (a full disk, a Ctrl-C) leaves nothing open behind it
                raise
            finally:
                self._last_step = time.monotonic()

    def _watch(self) -> None:
        if self._watcher is None:
            self._watcher = threading.Thread(
                target=self._release_when_asked, name="sago-release", daemon=True
            )
            self._watcher.start()

    def _release_when_asked(self) -> None:
        while not self._closed.wait(RELEASE_POLL_S):
            if self._store is None:
                continue
            now = time.monotonic()
            idle = now - self._last_step >= IDLE_RELEASE_S
            asked = now - self._opened_at >= HOLD_AT_LEAST_S and release_requested(self.path)
            if not (idle or asked):
                continue
            if self._turn.acquire(blocking=False):  # a step in progress: asked again after it
                try:
                    self._let_go()
                    if asked:
                        self._reopen_after = time.monotonic() + GIVE_WAY_S
                finally:
                    self._turn.release()

    def _let_go(self) -> None:
        if self._store is not None:
            store, self._store = self._store, None
            store.close()

    def close(self) -> None:
        """Let the file go and stop watching for requests."""
        self._closed.set()
        with self._turn:
            self._let_go()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=1.0)
