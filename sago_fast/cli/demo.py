"""Run the embedded default job (zoo checkpoints × built-in suites, all four axes) and show the results."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sago_fast.cli.options import DeviceOpt

EXAMPLE_SQL = (
    "SELECT family, round(avg(value), 3) AS flip_rate FROM item_scores "
    "WHERE axis = 'generation' AND metric = 'flip_rate' AND family IS NOT NULL GROUP BY family ORDER BY flip_rate DESC"
)


def demo_command(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder for the zoo, exports and database.")
    ] = Path("sago_out/demo"),
    device: DeviceOpt = "cpu",
    n_examples: Annotated[int, typer.Option("--limit", help="Examples of each built-in suite.")] = 40,
) -> None:
    from sago_fast.cli.query import render_table
    from sago_fast.demo import DemoConfig, run_demo
    from sago_fast.run.pipeline import summary_rows
    from sago_fast.store import Store

    result = run_demo(DemoConfig(out_dir=out, device=device, n_examples=n_examples))
    with Store(result.db_path, read_only=True) as store:
        columns, rows = summary_rows(store, result.run_id)
    typer.echo(render_table(columns, rows))
    typer.echo(
        f"\nrun {result.run_id} on {result.provider}: {len(result.units)} units (checkpoint × dataset)"
    )
    typer.echo(f"results: {Path(result.db_path).resolve()}")
    typer.echo(f'try:     sago query --db {result.db_path} "{EXAMPLE_SQL}"')
