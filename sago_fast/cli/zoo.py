"""Train (or reuse) the demo zoo: tiny LMs on the built-in suites, saved at several steps, with accuracy per template."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def zoo_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the zoo checkpoints.")] = Path(
        "sago_out/zoo"
    ),
    eval_examples: Annotated[int, typer.Option(help="Examples per suite for the accuracy table.")] = 60,
) -> None:
    from sago_fast.cli.query import render_table
    from sago_fast.zoo import ZooConfig, build_zoo
    from sago_fast.zoo.report import accuracy_rows

    config = ZooConfig()
    result = build_zoo(out, config)
    typer.echo(
        f"zoo {'reused' if result.reused else 'trained'}: {', '.join(str(p) for p in result.checkpoints)}"
    )
    columns, rows = accuracy_rows(result, config, eval_examples, cache_dir=out / "exports")
    typer.echo(render_table(columns, rows))
