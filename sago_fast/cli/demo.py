"""Run the embedded default job (zoo checkpoints × built-in suites, four axes, statistics, HTML report)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sago_fast.cli.options import DeviceOpt

EXAMPLE_SQL = (
    "SELECT family, round(avg(value), 3) AS flip_rate FROM item_scores "
    "WHERE axis = 'generation' AND metric = 'flip_rate' AND family IS NOT NULL GROUP BY family ORDER BY flip_rate DESC"
)

STATS_SQL = (
    "SELECT r.source, m.model, r.rank, round(r.estimate, 3) AS "
    "answer_disagreement, round(r.friedman_p, 4) AS friedman_p FROM rankings r JOIN model_names m USING (model_id) "
    "WHERE r.axis = 'generation' AND r.family IS NULL ORDER BY r.source, r.rank"
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
    from sago_fast.report import write_report
    from sago_fast.store import Store
    from sago_fast.store.queries import summary_rows

    result = run_demo(DemoConfig(out_dir=out, device=device, n_examples=n_examples), light_start=True)
    db = str(result.db_path)  # the demo never shards: it always writes its database
    with Store(db, read_only=True) as store:
        columns, rows = summary_rows(store, result.run_id)
    typer.echo(render_table(columns, rows))
    typer.echo(f"\n{result.describe()}")
    typer.echo(f"results: {Path(db).resolve()}")
    report = write_report(db, out / "report.html", result.run_id)
    typer.echo(f'report:  {report.resolve()}  (statistics: sago query --db {result.db_path} "{STATS_SQL}")')
    typer.echo(f'try:     sago query --db {result.db_path} "{EXAMPLE_SQL}"')
