"""Giving a results file's freed space back to the disk.

A unit's chunks keep their partial state (pooled activations of every variant, for the dataset-level
metrics) in the file until the unit finishes, and then delete it. DuckDB reuses the freed blocks for later
writes but never shrinks the file, so after a run a file can be tens of times its data: a 300-item full
design MMLU run left 954 MB on disk for 15 MB of used blocks. When the free blocks make the file more than
``SLACK`` times its used blocks, :func:`compact` rewrites it with ``COPY FROM DATABASE`` (every table,
view, constraint and row as it is) into a file beside it, which then replaces it (1.3 s for that file).

It runs at the end of ``sago run`` when no run in the file is still running (the last process to finish
compacts), with the file held as any writer holds it; a reader that had the old file open keeps reading it
until it closes.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from sago_fast.atomic import atomic_path
from sago_fast.store.store import Store

log = logging.getLogger(__name__)

SLACK = 1.2  # a file may be this many times its used blocks before it is rewritten


@dataclass(frozen=True)
class Blocks:
    """``PRAGMA database_size``: the file's blocks, those holding data, and their size in bytes."""

    total: int
    used: int
    block_size: int

    @property
    def slack(self) -> float:
        return self.total / max(self.used, 1)


def blocks(store: Store) -> Blocks:
    _, rows = store.query("SELECT total_blocks, used_blocks, block_size FROM pragma_database_size()")
    total, used, block_size = rows[0]
    return Blocks(int(total), int(used), int(block_size))


def compact(path: str | os.PathLike[str], slack: float = SLACK) -> tuple[int, int] | None:
    """Rewrite the results file ``path`` without its free blocks when it is over ``slack`` times its used
    blocks; returns (bytes before, bytes after), or None when it was left as it is."""
    path = os.fspath(path)
    with Store(path) as store:
        before = blocks(store)
        store.mark_dead_runs()
        running = store.query("SELECT count(*) FROM runs WHERE status = 'running'")[1][0][0]
    if before.slack <= slack or running:
        return None  # small enough, or another process writes the file (its last run compacts it)
    catalog = Path(path).stem  # DuckDB names a file's catalog after its stem
    if '"' in catalog:
        log.info("%s: not compacted (a double quote in its name)", path)
        return None
    size_before = os.path.getsize(path)
    with atomic_path(path) as tmp:
        os.unlink(tmp)  # DuckDB creates the copy itself
        with Store(path) as store:
            store.query("CHECKPOINT")
            store.query("ATTACH $copy AS compacted", {"copy": os.fspath(tmp)})
            store.query(f'COPY FROM DATABASE "{catalog}" TO compacted')
            store.query("DETACH compacted")
    size_after = os.path.getsize(path)
    log.info(
        "%s: rewritten without its free blocks: %.1f MB -> %.1f MB",
        path,
        size_before / 1e6,
        size_after / 1e6,
    )
    return size_before, size_after
