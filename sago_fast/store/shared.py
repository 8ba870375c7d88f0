"""A results file that many processes write and read: each step opens it, does its work, and closes it.

A writer never keeps the file open between steps, so readers (``sago query``, ``stats``, ``report``,
``status``) and other writers get in between its commits; an open waits while another process holds the
file (:mod:`sago_fast.store.locking`). Within one process the threads that write (a run's commits and its
heartbeat) take turns on one lock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sago_fast.store.store import Store

SINK_MEMORY_LIMIT = "1GB"  # DuckDB's buffer pool while a step writes


class SharedFile:
    """The results file ``path``, opened read-write for one step at a time (``wait``: seconds to wait for
    another process, None for ``$SAGO_DB_WAIT`` or the writer's default)."""

    def __init__(self, path: str | os.PathLike[str], wait: float | None = None) -> None:
        self.path = str(path)
        self.wait = wait
        self._turn = threading.Lock()

    @contextmanager
    def step(self) -> Iterator[Store]:
        """The file, open for one step; closed (and so free for other processes) when the step ends."""
        with self._turn:
            store = Store(self.path, wait=self.wait)
            try:
                # DuckDB keeps the pages it wrote in its buffer pool up to 80% of RAM by default
                store.query(f"SET memory_limit = '{SINK_MEMORY_LIMIT}'")
                yield store
            finally:
                store.close()
