"""Run the embedded default job on a tiny local checkpoint and print where the results are."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sago_fast.cli.options import DeviceOpt


def demo_command(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder for the checkpoint, exports and database.")
    ] = Path("sago_out/demo"),
    device: DeviceOpt = "cpu",
) -> None:
    from sago_fast.cli.query import render_table
    from sago_fast.demo import DemoConfig, run_demo
    from sago_fast.store import Store

    result = run_demo(DemoConfig(out_dir=out, device=device))
    with Store(result.db_path, read_only=True) as store:
        columns, rows = store.query(
            "SELECT example_id, n_prompt_tokens, top_token, round(top_logprob, 3) AS top_logprob, "
            "round(entropy, 3) AS entropy FROM outputs WHERE run_id = $run ORDER BY example_id",
            {"run": result.run_id},
        )
    typer.echo(render_table(columns, rows))
    typer.echo(f"\nrun {result.run_id} on {result.provider}: {result.n_outputs} outputs")
    typer.echo(f"results: {result.db_path.resolve()}")
    typer.echo(f'try:     sago query --db {result.db_path} "SELECT * FROM outputs LIMIT 5"')
