"""Whether the process behind a ``workers`` row is alive: working, heard from lately and, on this host,
still there (the same process, not a later one that reuses its pid)."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime
from pathlib import Path


def utc_now() -> datetime:
    """Now, as the naive UTC timestamp the file stores."""
    return datetime.now(UTC).replace(tzinfo=None)


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine (one of another user counts)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_ticks(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot, from ``/proc``), or "" where unknown: with the
    pid it tells a process from a later one that reuses its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def dead_reason(
    worker_id: str | None,
    host: str | None,
    pid: int | None,
    state: str | None,
    heartbeat: datetime | None,
    stale_after_s: float,
    now: datetime | None = None,
) -> str:
    """Why a worker row's process is dead, in words; "" when it is alive (``worker_id`` is
    ``host:pid:start``)."""
    if worker_id is None or pid is None:
        return "no record of it"
    if state != "working":
        return f"it is {state}"
    if heartbeat is None:
        return "no heartbeat"
    silent = ((now or utc_now()) - heartbeat).total_seconds()
    if silent > stale_after_s:
        return f"no heartbeat for {silent:.0f} s"
    if host == socket.gethostname():
        if not process_alive(int(pid)):
            return "its process is gone"
        recorded, current = worker_id.rsplit(":", 1)[-1], start_ticks(int(pid))
        if (
            current and recorded.isdigit() and len(recorded) < 16 and current != recorded
        ):  # ticks, not time_ns
            return "its pid now belongs to another process"
    return ""
