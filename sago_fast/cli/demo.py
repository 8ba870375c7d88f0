"""The demo and its models: `sago demo`, `sago zoo` (each command's help is its ``*_HELP``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sago_fast.cli.options import DeviceOpt

DEMO_HELP = """Run the embedded default job (zoo checkpoints × built-in suites, four axes, statistics, HTML report)."""

ZOO_HELP = """The demo zoo (tiny LMs trained on the built-in suites, saved at several steps) with accuracy per template."""


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
    from sago_fast.cli.run import say_design
    from sago_fast.demo import DemoConfig, run_demo
    from sago_fast.report import write_report
    from sago_fast.store import Store
    from sago_fast.store.queries import summary_rows
    from sago_fast.store.reads import RunReads

    result = run_demo(DemoConfig(out_dir=out, device=device, n_examples=n_examples), light_start=True)
    db = str(result.db_path)  # the demo never shards: it always writes its database
    with Store(db, read_only=True) as store:
        columns, rows = summary_rows(store, result.run_id)
        designs = RunReads(store, result.run_id).designs()
    typer.echo(render_table(columns, rows))
    say_design(designs)
    typer.echo(f"\n{result.describe()}")
    typer.echo(f"results: {Path(db).resolve()}")
    report = write_report(db, out / "report.html", result.run_id)
    typer.echo(f'report:  {report.resolve()}  (statistics: sago query --db {result.db_path} "{STATS_SQL}")')
    typer.echo(f'try:     sago query --db {result.db_path} "{EXAMPLE_SQL}"')


def zoo_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the zoo checkpoints.")] = Path(
        "sago_out/zoo"
    ),
    eval_examples: Annotated[
        int, typer.Option("--eval-examples", help="Examples per suite for the accuracy table.")
    ] = 60,
    train: Annotated[
        bool,
        typer.Option(
            "--train",
            help="Train a reproduction instead of using the shipped zoo (~2 min on 2 cores; the bytes match "
            "the shipped ones only on a machine like the one that trained them).",
        ),
    ] = False,
    lora: Annotated[
        str | None,
        typer.Option(
            "--lora",
            help="Instead: fine-tune LoRA adapters of this base (checkpoint folder or .gguf) on the built-in "
            "suites and save them in --out as a Trainer-style run folder (checkpoint-N/; needs peft).",
        ),
    ] = None,
) -> None:
    from sago_fast.atomic import check_writable
    from sago_fast.cli.query import render_table
    from sago_fast.errors import InputError
    from sago_fast.zoo import ZooConfig, build_zoo
    from sago_fast.zoo.accuracy import accuracy_rows, compare_with_shipped

    if eval_examples < 1:
        raise InputError(f"--eval-examples must be at least 1, not {eval_examples}")
    check_writable(out, what="--out", directory=True)
    if lora is not None:
        from sago_fast.zoo.lora_training import train_lora_run

        members = train_lora_run(lora, out)
        typer.echo(f"LoRA run of {lora}: {', '.join(str(p) for p in members)}")
        return
    config = ZooConfig()
    result = build_zoo(out, config, train=train)
    typer.echo(f"zoo ({result.source}): {', '.join(str(p) for p in result.checkpoints)}")
    if train:
        typer.echo(compare_with_shipped(result, config))
    columns, rows = accuracy_rows(result, config, eval_examples, cache_dir=out / "exports")
    typer.echo(render_table(columns, rows))
