"""Merge Parquet unit folders written by `sago run --shard i/N` into a results file (idempotent)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sago_fast.cli.options import DbOpt


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
