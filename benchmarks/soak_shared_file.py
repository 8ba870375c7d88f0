"""Soak test of many processes on one results file: 3 `sago run` writers on the same model list and file,
writers killed with SIGKILL at random and started again, and a reader reading the file all along.

Then it checks:
- every planned unit is done exactly once (`units`), every chunk committed once (`unit_chunks`), and no
  table holds a duplicate row;
- the tables equal one clean single-process run of the same command (`tables_equal.py`, floats within
  1e-6; which process did what, wall times and timestamps left out);
- the reader never saw a partial chunk: each time it read, the examples with item scores, outputs and
  variants of every (model, dataset) were exactly those of its committed chunks, and the counts it saw
  never went down.

    python benchmarks/soak_shared_file.py                    # ~3 minutes of kills on 2 cores
    python benchmarks/soak_shared_file.py --seconds 60 --limit 40

Exit status 0 when every check holds, 1 otherwise (each failure on one line).
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from tables_equal import compare, dump

log = logging.getLogger("soak")

# Per (model, dataset): the examples of its committed chunks against the examples of each result table.
# Read in one transaction, so what the reader sees is one committed state of the file.
CHUNK_EXAMPLES = """
    WITH chunks AS (SELECT model_id, dataset_id, unnest(example_ids) AS example_id
                    FROM unit_chunks WHERE run_id = $run)
    SELECT '{table}', count(*) FROM (
        (SELECT DISTINCT model_id, dataset_id, example_id FROM chunks
         EXCEPT SELECT DISTINCT model_id, dataset_id, example_id FROM {table} WHERE run_id = $run)
        UNION ALL
        (SELECT DISTINCT model_id, dataset_id, example_id FROM {table} WHERE run_id = $run
         EXCEPT SELECT DISTINCT model_id, dataset_id, example_id FROM chunks))
"""
DUPLICATES = {
    "units": "SELECT count(*) - count(DISTINCT (run_id, unit_id)) FROM units",
    "unit_chunks": "SELECT count(*) - count(DISTINCT (run_id, unit_id, chunk)) FROM unit_chunks",
    "outputs": "SELECT count(*) - count(DISTINCT (run_id, model_id, variant_id, replicate)) FROM outputs",
    "item_scores": "SELECT count(*) - count(DISTINCT (run_id, model_id, dataset_id, example_id, axis, metric, "
    "family)) FROM item_scores",
}


@dataclass
class Seen:
    """What the reader saw: reads done, the last counts, and every inconsistency (one line each)."""

    reads: int = 0
    waits_over_1s: int = 0
    last: tuple[int, int] = (0, 0)  # (committed chunks, item score rows)
    problems: list[str] = field(default_factory=list)


def read_loop(db: Path, run_id: list[str], seen: Seen, stop: threading.Event) -> None:
    """Read the file until ``stop``: every table's examples equal the committed chunks'."""
    from sago_fast.errors import StoreError
    from sago_fast.store import Store

    while not stop.is_set():
        if not db.exists() or not run_id:
            time.sleep(0.2)
            continue
        start = time.monotonic()
        try:
            with Store(db, read_only=True) as store:
                opened = time.monotonic() - start
                store.query("BEGIN TRANSACTION")
                for table in ("item_scores", "outputs"):
                    _, rows = store.query(CHUNK_EXAMPLES.format(table=table), {"run": run_id[0]})
                    if rows[0][1]:
                        seen.problems.append(
                            f"read {seen.reads}: {rows[0][1]} examples of {table} differ from the committed chunks"
                        )
                _, counts = store.query(
                    "SELECT (SELECT count(*) FROM unit_chunks WHERE run_id = $run), "
                    "(SELECT count(*) FROM item_scores WHERE run_id = $run)",
                    {"run": run_id[0]},
                )
                store.query("COMMIT")
        except StoreError as exc:
            if "schema version" in str(exc) or "no such" in str(exc):
                time.sleep(0.2)  # the first writer is still creating the file
                continue
            seen.problems.append(f"read {seen.reads}: {exc}")
            continue
        seen.waits_over_1s += opened > 1.0
        now = (int(counts[0][0]), int(counts[0][1]))
        if now[0] < seen.last[0] or now[1] < seen.last[1]:
            seen.problems.append(f"read {seen.reads}: counts went down from {seen.last} to {now}")
        seen.last = now
        seen.reads += 1
        time.sleep(0.1)


def sago_run(args: list[str], db: Path, logs: Path, n: int) -> subprocess.Popen:
    out = (logs / f"writer-{n}.log").open("w")
    command = [sys.executable, "-m", "sago_fast.cli.app", "run", *args, "--db", str(db)]
    return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


def run_done(db: Path, run_id: list[str]) -> bool:
    from sago_fast.store import Store

    if not run_id or not db.exists():
        return False
    with Store(db, read_only=True) as store:
        _, rows = store.query("SELECT status FROM runs WHERE run_id = $run", {"run": run_id[0]})
    return bool(rows) and rows[0][0] == "done"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=180.0, help="how long writers are killed at random")
    parser.add_argument("--limit", type=int, default=120, help="examples per dataset")
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--kill-every", type=float, nargs=2, default=(2.0, 8.0), metavar=("MIN", "MAX"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--timeout", type=float, default=1800.0, help="give up after this long in all")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    rng = random.Random(args.seed)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="sago-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    zoo = work / "zoo"
    if not zoo.exists():
        subprocess.run(
            [sys.executable, "-m", "sago_fast.cli.app", "zoo", "--out", str(zoo)],
            check=True,
            capture_output=True,
        )
    models = [str(p) for p in sorted(zoo.glob("step-*"))]
    run_args = [a for m in models for a in ("-m", m)] + [
        "-d",
        "capitals",
        "-d",
        "comparison",
        "-d",
        "letters",
    ]
    run_args += [
        "--limit",
        str(args.limit),
        "-k",
        "1",
        "--chunk-memory-mb",
        "1",
        "--cache-dir",
        str(work / "exports"),
    ]

    clean = work / "clean.duckdb"
    if not clean.exists():
        log.info("clean single-process run -> %s", clean)
        start = time.monotonic()
        done = sago_run(run_args, clean, logs, 0).wait()
        if done != 0:
            print(f"FAIL: the clean run exited {done} (see {logs / 'writer-0.log'})")
            return 1
        log.info("clean run: %.0f s", time.monotonic() - start)
    from sago_fast.store import Store

    with Store(clean, read_only=True) as store:
        _, rows = store.query("SELECT run_id FROM runs")
    run_id = [rows[0][0]]

    db = work / "soak.duckdb"
    for old in work.glob("soak.duckdb*"):
        old.unlink()
    seen, stop = Seen(), threading.Event()
    reader = threading.Thread(target=read_loop, args=(db, run_id, seen, stop), daemon=True)
    reader.start()
    writers: dict[int, subprocess.Popen] = {}
    started, kills, launches = time.monotonic(), 0, 0
    next_kill = started + rng.uniform(*args.kill_every)
    while True:
        now = time.monotonic()
        if now - started > args.timeout:
            print(f"FAIL: not done after {args.timeout:.0f} s")
            break
        finished = [n for n, p in writers.items() if p.poll() is not None]
        for n in finished:
            writers.pop(n)
        if run_done(db, run_id) and not writers:
            break
        if not run_done(db, run_id):
            for n in range(args.writers):  # keep the writers going until the run is done
                if n not in writers:
                    launches += 1
                    writers[n] = sago_run(run_args, db, logs, 100 * n + launches)
        if now < started + args.seconds and now >= next_kill and writers:
            victim = rng.choice(sorted(writers))
            writers[victim].send_signal(signal.SIGKILL)
            writers[victim].wait()
            writers.pop(victim)
            kills += 1
            next_kill = now + rng.uniform(*args.kill_every)
        time.sleep(0.1)
    stop.set()
    reader.join(timeout=60)
    for p in writers.values():
        p.kill()
    elapsed = time.monotonic() - started

    problems = list(seen.problems)
    with Store(db, read_only=True) as store:
        for table, sql in DUPLICATES.items():
            _, rows = store.query(sql)
            if rows[0][0]:
                problems.append(f"{table}: {rows[0][0]} duplicate rows")
        _, units = store.query("SELECT count(*), count(DISTINCT unit_id) FROM units WHERE status = 'done'")
        _, planned = store.query("SELECT count(*), sum(takeovers) FROM run_units")
    if units[0][0] != planned[0][0]:
        problems.append(f"{units[0][0]} units done of {planned[0][0]} planned")
    before, after = work / "tables-clean", work / "tables-soak"
    for folder in (before, after):
        shutil.rmtree(folder, ignore_errors=True)
    dump(clean, before)
    dump(db, after)
    problems += compare(before, after, 1e-6)
    print(
        f"soak: {elapsed:.0f} s, {args.writers} writers, {kills} SIGKILLs, {launches} writer starts, "
        f"{planned[0][1]} claims taken over; reader: {seen.reads} consistent reads, last {seen.last[0]} chunks / "
        f"{seen.last[1]} item scores, {seen.waits_over_1s} waits over 1 s; {units[0][0]} units done once"
    )
    for problem in problems:
        print(f"FAIL: {problem}")
    if not problems:
        print(
            "every unit done once, no duplicate rows, tables equal to the clean run (1e-6), no partial chunk seen"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
