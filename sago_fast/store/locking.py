"""Opening a results file that another process holds: wait for it, saying for whom, within a bound.

DuckDB lets one process open a file read-write, or any number read-only, never both; a second opener gets
an immediate ``IO Error: Could not set lock on file ...: Conflicting lock is held in PROGRAM (PID n)``. sago
processes hold a results file only for as long as one step takes (a reader: its query; a writer: until
another process asks for the file, :mod:`sago_fast.store.shared`), so an opener that finds the file held
asks for it and tries again until it is free, for at most ``wait`` seconds. After ``SAY_AFTER_S`` of waiting it logs (a warning, shown by default) the file and the process
holding it; when the bound is reached it is one line, :class:`~sago_fast.errors.StoreError`.

DuckDB's locks are ``fcntl`` locks: the system drops them when their process dies, so a killed process
never leaves the file locked. They are not reliable on network filesystems (NFS, SMB): many processes on
one machine share a file; across machines, shards and ``sago merge`` are the way.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sago_fast import defaults
from sago_fast.errors import StoreError

log = logging.getLogger(__name__)

SAY_AFTER_S = 1.0  # waits shorter than this are silent (a writer's commit takes ~50 ms)
SAY_EVERY_S = 15.0  # then a line this often
POLL_S = (0.005, 0.1)  # first and longest pause between tries (doubling)
REQUEST_FRESH_S = 1.0  # a request for a held file counts for this long after it was made
HOLDER = re.compile(r"held in (?P<program>.*?) \(PID (?P<pid>\d+)\)")


@dataclass(frozen=True)
class Holder:
    """The process DuckDB names as holding a file: its pid and program, and its command line when this
    machine can read it (``/proc``)."""

    pid: int | None
    program: str

    @classmethod
    def from_error(cls, text: str) -> Holder:
        found = HOLDER.search(text)
        if found is None:
            return cls(None, "another process")
        return cls(int(found["pid"]), found["program"])

    def describe(self) -> str:
        if self.pid is None:
            return self.program
        command = _command_line(self.pid)
        return f"PID {self.pid} ({command or self.program})"


def _command_line(pid: int, most: int = 80) -> str:
    """``sago run -m tiny ...`` for a process of this machine, shortened; empty when unknown."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    words = [w.decode(errors="replace") for w in raw.split(b"\0") if w]
    for at, word in enumerate(
        words[:3]
    ):  # `python .../bin/sago run ...`, `python -m sago_fast.cli.app run ...`
        if Path(word).name == "sago" or word == "sago_fast.cli.app":
            words = ["sago", *words[at + 1 :]]
            break
    text = " ".join(" ".join(words).split())  # one line, whatever the arguments hold
    return text if len(text) <= most else text[: most - 3] + "..."


def request_file(path: str) -> Path:
    """The file whose modification time asks the process holding ``path`` to let it go."""
    return Path(f"{path}.wanted")


def request_release(path: str) -> None:
    """Ask the holder of ``path`` to let it go (:mod:`sago_fast.store.shared`); a folder this process
    cannot write only means the holder lets go when idle instead."""
    try:
        request_file(path).touch()
    except OSError:
        pass


def release_requested(path: str) -> bool:
    """Whether another process asked for ``path`` within the last ``REQUEST_FRESH_S``."""
    try:
        asked = request_file(path).stat().st_mtime
    except OSError:
        return False
    return time.time() - asked < REQUEST_FRESH_S


def default_wait(read_only: bool) -> float:
    """Seconds an opener waits for a held file: ``$SAGO_DB_WAIT`` if set, else the reader's or the
    writer's default (:data:`~sago_fast.defaults.DB_READ_WAIT_S`, :data:`~sago_fast.defaults.DB_WRITE_WAIT_S`)."""
    given = os.environ.get("SAGO_DB_WAIT")
    if given:
        try:
            value = float(given)
        except ValueError:
            raise StoreError(f"$SAGO_DB_WAIT must be a number of seconds, not {given!r}") from None
        if value < 0:
            raise StoreError(f"$SAGO_DB_WAIT must be a number of seconds >= 0, not {given!r}")
        return value
    return defaults.DB_READ_WAIT_S if read_only else defaults.DB_WRITE_WAIT_S


def connect_waiting(path: str, read_only: bool, wait: float | None = None) -> Any:
    """A DuckDB connection to ``path``, waiting up to ``wait`` seconds (None: :func:`default_wait`) while
    another process holds the file; StoreError (one line) for a file that stays held, or cannot be opened."""
    import duckdb

    bound = default_wait(read_only) if wait is None else wait
    start = time.monotonic()
    pause, say_at = POLL_S[0], SAY_AFTER_S
    while True:
        try:
            return duckdb.connect(path, read_only=read_only)
        except duckdb.IOException as exc:
            text = str(exc).splitlines()[0]
            if "lock" not in text.lower():
                raise StoreError(f"{path}: cannot open database ({text})") from None
            request_release(path)
            waited = time.monotonic() - start
            holder = Holder.from_error(text)
            if waited >= bound:
                raise StoreError(
                    f"{path}: still held by {holder.describe()} after waiting {waited:.1f} s "
                    f"(set $SAGO_DB_WAIT to wait longer)"
                ) from None
            if waited >= say_at:
                say_at = waited + SAY_EVERY_S
                log.warning(
                    "waiting for %s: held by %s (%.0f s so far, at most %.0f s)",
                    path,
                    holder.describe(),
                    waited,
                    bound,
                )
            time.sleep(min(pause, max(0.0, bound - waited)))
            pause = min(pause * 2, POLL_S[1])
        except duckdb.Error as exc:
            raise StoreError(f"{path}: not a DuckDB database ({str(exc).splitlines()[0]})") from None
