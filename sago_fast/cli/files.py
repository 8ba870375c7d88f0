"""Commands on results files besides query: `sago merge`, `sago status` (each command's help is its ``*_HELP``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from sago_fast.cli.options import DbOpt

MERGE_HELP = "Merge Parquet unit folders written by `sago run --shard i/N` into a results file (idempotent)."

STATUS_HELP = """Show the runs of a results file and what is running on it: the processes writing (host, pid, last
heartbeat), each unit's state (claimed, chunks and examples committed, done, stopped and why, failed) and
the time left. Works while runs write the file."""


def merge_command(
    shards: Annotated[
        list[Path], typer.Argument(help="Shard folders (the --shard-dir of each job), searched recursively.")
    ],
    db: DbOpt,
    no_stats: Annotated[
        bool, typer.Option("--no-stats", help="Skip the statistics of completed runs.")
    ] = False,
) -> None:
    from sago_fast.errors import InputError
    from sago_fast.run.merge import merge_shards

    missing = [str(s) for s in shards if not s.exists()]
    if missing:
        raise InputError(f"no such shard folder: {', '.join(missing)}")
    result = merge_shards(shards, db)
    if not (result.merged or result.already or result.damaged):
        raise InputError(
            f"no unit folders under {', '.join(map(str, shards))} (each holds a manifest.json; they are "
            "written under the --shard-dir of `sago run --shard i/N`); nothing merged"
        )
    typer.echo(
        f"merged {len(result.merged)} units, {len(result.already)} already in {db}, {len(result.damaged)} damaged"
    )
    for folder, reason in result.damaged:
        typer.echo(f"  skipped {folder}: {reason}", err=True)
    for run_id, status in result.runs.items():
        typer.echo(f"run {run_id}: {status}")
        if status == "done" and not no_stats and result.merged:
            from sago_fast.stats import run_stats

            run_stats(db, run_id)
    if result.damaged:
        raise InputError(
            f"{len(result.damaged)} shard folder(s) damaged or incomplete and skipped (first: {result.damaged[0][0]}: "
            f"{result.damaged[0][1]}); the others are merged"
        )


def status_command(
    db: DbOpt,
    run_id: Annotated[str | None, typer.Option("--run", help="Only this run (default: every run).")] = None,
    all_units: Annotated[
        bool, typer.Option("--all", help="List every unit (default: those not done, and 20 at most).")
    ] = False,
) -> None:
    from sago_fast.errors import InputError
    from sago_fast.store.status import run_status

    runs = run_status(db, run_id)
    if not runs:
        raise InputError(f"{db}: no run {run_id!r}" if run_id else f"{db}: no runs yet")
    for i, run in enumerate(runs):
        if i:
            typer.echo("")
        typer.echo("\n".join(describe_run(run, all_units)))


def describe_run(run, all_units: bool = False) -> list[str]:  # type: ignore[no-untyped-def]
    """The lines ``sago status`` prints for one :class:`~sago_fast.store.status.RunStatus`."""
    from sago_fast.cli.query import render_table

    when = f" since {run.created_at:%Y-%m-%d %H:%M:%S} UTC" if run.created_at else ""
    lines = [f"run {run.run_id}: {run.status}{when}"]
    for w in run.workers:
        beat = "" if math.isnan(w.heartbeat_s_ago) else f", last heartbeat {w.heartbeat_s_ago:.0f} s ago"
        how = "working" if w.alive else f"{w.state}" if w.state != "working" else f"dead ({w.dead_because})"
        lines.append(f"  process PID {w.pid} on {w.host}: {how}{beat}: {w.command[:100]}")
    counts = ", ".join(
        f"{run.count(s)} {s}"
        for s in ("done", "stopped", "claimed", "waiting", "failed", "not merged")
        if run.count(s)
    )
    lines.append(f"  units: {len(run.units)} ({counts or 'none planned'})")
    eta = f"; {run.eta_note}" if run.eta_note else ""
    if run.eta_s is not None:
        eta = f"; about {_duration(run.eta_s)} left"
    lines.append(f"  examples: {run.examples_done} of at most {run.examples_planned} done{eta}")
    shown = [u for u in run.units if all_units or u.state not in ("done", "stopped")]
    if not all_units:
        shown = shown[:20]
    if shown:
        columns = ["#", "checkpoint", "dataset", "state", "by", "chunks", "examples", "note"]
        rows = [
            (
                u.position + 1,
                u.checkpoint,
                u.dataset,
                u.state,
                u.by,
                u.chunks,
                f"{u.examples_done}/{u.examples_planned}",
                u.error or u.stop_reason or (f"taken over {u.takeovers}x" if u.takeovers else ""),
            )
            for u in shown
        ]
        lines += ["  " + line for line in render_table(columns, rows).splitlines()]
    return lines


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
