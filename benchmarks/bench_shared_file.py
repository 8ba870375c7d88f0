"""What sharing the results file costs a run, and what a second process on it gains.

On the demo zoo (3 checkpoints x capitals and comparison, --limit N, chunks of --chunk-memory-mb so that
every unit commits many chunks), whole `sago run` processes, medians of --rounds, alternating:

- before: the commit given by --before (the run holds the file from start to end), against
- after : this checkout (the file held between steps and let go when another process asks), alone, and
          with a reader opening the file every --read-every s while it runs (its waits measured);
- two   : two `sago run` processes of this checkout started a second apart on the same model list and file.

It also times one step on the finished file (open read-write, one small update, close), the cost every
commit pays on top of its rows.

    python benchmarks/bench_shared_file.py --rounds 3 --limit 120
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BEFORE = "90fb06b"  # the last commit before issue 37: one connection held for the whole run


def sago(args: list[str], db: Path, code: Path | None) -> subprocess.Popen:
    env = dict(os.environ)
    if code is not None:  # run another checkout's sago_fast with this environment's packages
        env["PYTHONPATH"] = str(code)
    command = [sys.executable, "-m", "sago_fast.cli.app", "run", *args, "--db", str(db)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)


def timed(procs: list[subprocess.Popen]) -> float:
    start = time.monotonic()
    for p in procs:
        _, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"sago run failed: {err[-2000:]}")
    return time.monotonic() - start


def reader(db: Path, waits: list[float], stop: threading.Event, every: float) -> None:
    """Open the file read-only every ``every`` s and count its committed chunks, timing each open."""
    from sago_fast.errors import StoreError
    from sago_fast.store import Store

    while not stop.wait(every):
        if not db.exists():
            continue
        start = time.monotonic()
        try:
            with Store(db, read_only=True) as store:
                waits.append(time.monotonic() - start)
                store.query("SELECT count(*) FROM unit_chunks")
        except StoreError:
            continue  # the file is being created


def step_ms(db: Path, n: int = 20) -> tuple[float, float, float]:
    """Median ms of opening ``db`` read-write, one small update in a transaction, and closing it (which
    checkpoints): what letting the file go and taking it back costs a writer."""
    from sago_fast.store import Store

    parts = []
    for _ in range(n):
        start = time.perf_counter()
        store = Store(db)
        opened = time.perf_counter()
        with store.transaction():
            store.query("UPDATE runs SET status = status")
        written = time.perf_counter()
        store.close()
        parts.append((opened - start, written - opened, time.perf_counter() - written))
    return tuple(statistics.median(p) * 1e3 for p in zip(*parts, strict=True))  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=int, default=120)
    parser.add_argument("--chunk-memory-mb", type=float, default=2.0)
    parser.add_argument("--read-every", type=float, default=0.2, help="seconds between the reader's opens")
    parser.add_argument("--before", default=BEFORE)
    parser.add_argument(
        "--settings",
        default="before,after,read,two",
        help="which of before, after, read (after with a reader), two (two processes), two-before (two "
        "processes of the --before commit) to time",
    )
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "sago-bench-shared")
    args = parser.parse_args()
    settings = set(args.settings.split(","))
    if not settings <= {"before", "after", "read", "two", "two-before"} or "after" not in settings:
        parser.error("--settings: a subset of before,after,read,two,two-before that holds after")
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    zoo, old = work / "zoo", work / f"before-{args.before}"
    if not zoo.exists():
        subprocess.run(
            [sys.executable, "-m", "sago_fast.cli.app", "zoo", "--out", str(zoo)],
            check=True,
            capture_output=True,
        )
    if settings & {"before", "two-before"} and not old.exists():
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(old), args.before], check=True, capture_output=True
        )
    models = [a for m in sorted(zoo.glob("step-*")) for a in ("-m", str(m))]
    run_args = [*models, "-d", "capitals", "-d", "comparison", "--limit", str(args.limit), "-k", "1"]
    run_args += ["--chunk-memory-mb", str(args.chunk_memory_mb), "--cache-dir", str(work / "exports")]

    def fresh(name: str) -> Path:
        db = work / f"{name}-{time.time_ns()}.duckdb"
        return db

    timed([sago(run_args, fresh("warm"), None)])  # exports and Numba's cache, once
    before_s, after_s, read_s, two_s, two_before_s, waits = [], [], [], [], [], []
    for _ in range(args.rounds):
        if "before" in settings:
            before_s.append(timed([sago(run_args, fresh("before"), old)]))
        db = fresh("after")
        after_s.append(timed([sago(run_args, db, None)]))
        if "read" in settings:
            db = fresh("read")
            stop = threading.Event()
            watcher = threading.Thread(target=reader, args=(db, waits, stop, args.read_every), daemon=True)
            watcher.start()
            read_s.append(timed([sago(run_args, db, None)]))
            stop.set()
            watcher.join()
        if "two" in settings:
            shared = fresh("two")
            first = sago(run_args, shared, None)
            time.sleep(1.0)
            two_s.append(timed([first, sago(run_args, shared, None)]) + 1.0)
        if "two-before" in settings:
            shared = fresh("two-before")
            first = sago(run_args, shared, old)
            time.sleep(1.0)
            two_before_s.append(timed([first, sago(run_args, shared, old)]) + 1.0)
    from sago_fast.store import Store

    with Store(db, read_only=True) as store:
        _, rows = store.query("SELECT count(*) FROM unit_chunks")
    chunks = rows[0][0]
    open_ms, commit_ms, close_ms = step_ms(db)
    a = statistics.median(after_s)
    b = statistics.median(before_s) if before_s else a  # against the run alone when before is not timed
    print(
        f"demo zoo, 3 checkpoints x 2 datasets, --limit {args.limit}: {chunks} chunks; {os.cpu_count()} cores; "
        f"medians of {args.rounds}"
    )
    if before_s:
        print(f"  before ({args.before}, one connection for the whole run): {b:6.1f} s")
    print(f"  after (the file let go when asked), no reader:            {a:6.1f} s  ({a / b - 1:+.1%})")
    if read_s:
        r = statistics.median(read_s)
        print(
            f"  after, a reader asking every {args.read_every:g} s:                  {r:6.1f} s  ({r / b - 1:+.1%})"
        )
    if two_s:
        t = statistics.median(two_s)
        print(
            f"  two processes, a second apart, one file:                  {t:6.1f} s  ({t / a:.2f}x one process)"
        )
    if two_before_s:
        t = statistics.median(two_before_s)
        print(
            f"  two processes of {args.before}, a second apart, one file:         {t:6.1f} s  "
            f"({t / b:.2f}x its one process)"
        )
    print(
        f"  letting the file go and taking it back (on the finished file): open {open_ms:.0f} ms, "
        f"close {close_ms:.0f} ms (a small commit: {commit_ms:.0f} ms)"
    )
    waits.sort()
    if waits:
        p95 = waits[int(0.95 * (len(waits) - 1))]
        print(
            f"  the reader's waits for the file: median {statistics.median(waits) * 1e3:.0f} ms, "
            f"95th percentile {p95 * 1e3:.0f} ms, longest {waits[-1] * 1e3:.0f} ms ({len(waits)} reads)"
        )


if __name__ == "__main__":
    main()
