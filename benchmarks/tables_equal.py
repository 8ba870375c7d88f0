"""Are two results files the same results? Every table, row for row, floats within a tolerance.

A restructuring must not change a number. Record the tables of a job before the change, make the change,
run the same job again and compare:

    python benchmarks/tables_equal.py dump sago_out/demo/results.duckdb /tmp/before
    ...change the code, run the same job...
    python benchmarks/tables_equal.py dump sago_out/demo/results.duckdb /tmp/after
    python benchmarks/tables_equal.py compare /tmp/before /tmp/after

``dump`` writes each table to Parquet (what differs between two runs of one job by nature, such as wall
times, timestamps, host and pid, left out), rows in a canonical order. ``compare`` pairs rows by that order
and checks every column: floats (and lists of floats) within ``--tolerance`` (absolute, default 1e-6; NaN
equals NaN), everything else exactly. Exit status 1 and one line per differing table when they differ.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import duckdb

# columns that differ between two runs of one job by nature
VOLATILE = {
    "runs": ("created_at", "command", "config_json", "host", "pid", "status"),
    "units": ("seconds", "finished_at"),
    "unit_chunks": ("seconds", "finished_at", "state"),
    "exports": ("created_at", "seconds"),
    # which processes wrote a run, and which of them held each unit, is not a result
    "workers": ("worker_id", "run_id", "host", "pid", "command", "started_at", "heartbeat_at", "state"),
    "run_units": ("worker_id", "claimed_at", "takeovers", "error"),
    "lmeval_requests": ("session_id", "created_at"),
}
WALL_TIME = ("seconds", "finished_at", "created_at", "applied_at")


def dump(db: Path, out: Path) -> list[str]:
    """Each table of ``db`` to ``out/TABLE.parquet``, volatile columns left out, sorted by every column."""
    out.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(db), read_only=True)
    tables = [
        r[0]
        for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchall()
    ]
    for table in tables:
        columns = [r[0] for r in con.execute(f'DESCRIBE "{table}"').fetchall()]
        kept = [c for c in columns if c not in VOLATILE.get(table, ()) and c not in WALL_TIME]
        if not kept:
            continue
        listed = ", ".join(f'"{c}"' for c in kept)
        target = str(out / f"{table}.parquet").replace("'", "''")
        con.execute(f"COPY (SELECT {listed} FROM \"{table}\" ORDER BY ALL) TO '{target}' (FORMAT parquet)")
    con.close()
    return tables


def _close(a: object, b: object, tolerance: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tolerance
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y, tolerance) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], tolerance) for k in a)
    return a == b


def compare(before: Path, after: Path, tolerance: float) -> list[str]:
    """One line per table that differs (missing on one side, other row count, or a differing value)."""
    problems = []
    names_a = {p.stem for p in before.glob("*.parquet")}
    names_b = {p.stem for p in after.glob("*.parquet")}
    for name in sorted(names_a ^ names_b):
        problems.append(f"{name}: only in {'before' if name in names_a else 'after'}")
    con = duckdb.connect()
    for name in sorted(names_a & names_b):
        a = con.execute("SELECT * FROM read_parquet(?)", [str(before / f"{name}.parquet")])
        columns = [d[0] for d in a.description]
        rows_a = a.fetchall()
        b = con.execute("SELECT * FROM read_parquet(?)", [str(after / f"{name}.parquet")])
        if [d[0] for d in b.description] != columns:
            problems.append(f"{name}: columns differ")
            continue
        rows_b = b.fetchall()
        if len(rows_a) != len(rows_b):
            problems.append(f"{name}: {len(rows_a)} rows before, {len(rows_b)} after")
            continue
        for i, (ra, rb) in enumerate(zip(rows_a, rows_b, strict=True)):
            bad = [c for c, x, y in zip(columns, ra, rb, strict=True) if not _close(x, y, tolerance)]
            if bad:
                problems.append(f"{name}: row {i} differs in {', '.join(bad)}: {ra} vs {rb}"[:400])
                break
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump", help="write a results file's tables to Parquet")
    d.add_argument("db", type=Path)
    d.add_argument("out", type=Path)
    c = sub.add_parser("compare", help="compare two dumps")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--tolerance", type=float, default=1e-6)
    args = parser.parse_args(argv)
    if args.command == "dump":
        tables = dump(args.db, args.out)
        print(f"{len(tables)} tables of {args.db} -> {args.out}")
        return 0
    problems = compare(args.before, args.after, args.tolerance)
    for line in problems:
        print(line)
    if not problems:
        print(
            f"same results: every table of {args.before} equals {args.after} (floats within {args.tolerance:g})"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
