"""Run SQL against a results database (read-only) and print a table, CSV or JSON."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from sago_fast.cli.options import DbOpt

FORMATS = ("table", "csv", "json")


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def render_table(columns: list[str], rows: list[tuple[Any, ...]], max_width: int = 60) -> str:
    cells = [[_cell(v)[:max_width] for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    rule = "  ".join("-" * w for w in widths)
    body = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join([line, rule, *body, f"({len(rows)} row{'s' if len(rows) != 1 else ''})"])


def query_command(
    sql: Annotated[str, typer.Argument(help='SQL to run, e.g. "SELECT * FROM models".')],
    db: DbOpt,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, csv or json.")] = "table",
) -> None:
    from sago_fast.errors import SagoError
    from sago_fast.store import Store

    if fmt not in FORMATS:
        raise SagoError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    with Store(Path(db), read_only=True) as store:
        columns, rows = store.query(sql)
    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
    elif fmt == "json":
        typer.echo(json.dumps([dict(zip(columns, r, strict=True)) for r in rows], default=str, indent=1))
    else:
        typer.echo(render_table(columns, rows))
