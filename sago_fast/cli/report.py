"""Write a self-contained HTML report of a run (profiles, layers, rankings, correlations, unstable examples)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sago_fast.cli.options import DbOpt


def report_command(
    db: DbOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="HTML file to write.")] = Path("report.html"),
    run_id: Annotated[
        str | None, typer.Option("--run", help="Run id (default: the latest finished run).")
    ] = None,
    n_unstable: Annotated[int, typer.Option("--unstable", help="Most unstable examples to show.")] = 10,
) -> None:
    from sago_fast.atomic import check_writable
    from sago_fast.errors import InputError
    from sago_fast.report import write_report

    if not db.is_file():
        raise InputError(f"{db}: no such database")
    check_writable(out, what="--out")
    path = write_report(db, out, run_id, n_unstable=n_unstable)
    typer.echo(f"report -> {path.resolve()}")
