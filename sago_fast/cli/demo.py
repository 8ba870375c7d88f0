"""Run the embedded default job (zoo checkpoints × built-in variants) and print where the results are."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sago_fast.cli.options import DeviceOpt


def demo_command(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder for the zoo, exports and database.")
    ] = Path("sago_out/demo"),
    device: DeviceOpt = "cpu",
    n_examples: Annotated[
        int, typer.Option("--limit", help="Examples of the built-in suite to render.")
    ] = 40,
) -> None:
    from sago_fast.cli.query import render_table
    from sago_fast.demo import SUMMARY_SQL, DemoConfig, run_demo
    from sago_fast.store import Store

    result = run_demo(DemoConfig(out_dir=out, device=device, n_examples=n_examples))
    with Store(result.db_path, read_only=True) as store:
        columns, rows = store.query(SUMMARY_SQL, {"run": result.run_id})
    typer.echo(render_table(columns, rows))
    typer.echo(
        f"\nrun {result.run_id} on {result.provider}: {result.n_outputs} outputs from {len(result.checkpoints)} checkpoints"
    )
    typer.echo(f"results: {result.db_path.resolve()}")
    typer.echo(
        f'try:     sago query --db {result.db_path} "SELECT family, avg(correct::INT) AS acc FROM outputs '
        'JOIN variants USING (dataset_id, variant_id) GROUP BY family ORDER BY acc"'
    )
