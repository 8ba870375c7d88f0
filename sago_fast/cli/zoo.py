"""The demo zoo (tiny LMs trained on the built-in suites, saved at several steps) with accuracy per template."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


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
