"""Run SQL against a results database (read-only) and print a table, CSV, JSON or Markdown."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from sago_fast.cli.options import DbOpt
from sago_fast.store.reads import cell_text

FORMATS = ("table", "csv", "json", "markdown")
CUT_MARK = "…"  # ends a table cell that was cut at the column width


def _one_line(text: str) -> str:
    """Line breaks and tabs shown as ``\\n`` / ``\\t``, so that a prompt keeps to its row."""
    return text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + CUT_MARK


def render_table(columns: list[str], rows: list[tuple[Any, ...]], max_width: int = 60) -> str:
    """A terminal table: one line per row, cells cut at ``max_width`` characters and marked with ``…``
    (``--format csv|json|markdown`` give full values)."""
    cells = [[_fit(_one_line(cell_text(v)), max_width) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    rule = "  ".join("-" * w for w in widths)
    body = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join([line.rstrip(), rule, *body, f"({len(rows)} row{'s' if len(rows) != 1 else ''})"])


def render_markdown(columns: list[str], rows: list[tuple[Any, ...]]) -> str:
    """A GitHub-flavoured Markdown table with full values (pipes escaped, line breaks as ``<br>``)."""

    def cell(value: Any) -> str:
        return cell_text(value).replace("|", "\\|").replace("\r\n", "<br>").replace("\n", "<br>")

    lines = ["| " + " | ".join(cell(c) for c in columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def query_command(
    db: DbOpt,
    sql: Annotated[
        str | None,
        typer.Argument(
            help='SQL to run, e.g. "SELECT * FROM models"; several statements are run in turn. "-" reads it '
            "from standard input (for SQL that starts with a -- comment, or a pasted block)."
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", "-f", help="Read the SQL from this file (- for standard input)."),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option("--format", help="table (cells cut at 60 characters, marked …), csv, json or markdown."),
    ] = "table",
) -> None:
    from sago_fast.errors import SagoError
    from sago_fast.store import Store

    if fmt not in FORMATS:
        raise SagoError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    text = _sql_text(sql, file)
    with Store(Path(db), read_only=True) as store:
        statements = store.statements(text)
        if not statements:
            raise SagoError("no SQL statement given (only comments or blanks)")
        results = [store.query(statement) for statement in statements]
    for i, (columns, rows) in enumerate(results):
        if i:
            typer.echo("")
        _print(columns, rows, fmt)


def _sql_text(sql: str | None, file: Path | None) -> str:
    """The SQL from the argument, ``--file`` or standard input (``-``), exactly one of them."""
    from sago_fast.errors import InputError

    if file is not None and str(file) in FORMATS and not file.is_file():
        raise InputError(f"-f/--file reads the SQL from a file: for the output format, use --format {file}")
    if (sql is None) == (file is None):
        raise InputError(
            "give the SQL as one argument, or --file FILE (- for standard input), not both and not neither"
        )
    if file is not None and str(file) != "-":
        if not file.is_file():
            raise InputError(f"--file {file}: no such file")
        try:
            return file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"--file {file}: cannot read it ({exc})") from None
    if sql is not None and sql != "-":
        return sql
    return sys.stdin.read()


def _print(columns: list[str], rows: list[tuple[Any, ...]], fmt: str) -> None:
    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
    elif fmt == "json":
        typer.echo(json.dumps([dict(zip(columns, r, strict=True)) for r in rows], default=str, indent=1))
    elif fmt == "markdown":
        typer.echo(render_markdown(columns, rows))
    else:
        typer.echo(render_table(columns, rows))
