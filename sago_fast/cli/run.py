"""Evaluate checkpoints on datasets: variants → ONNX Runtime → the four SAGO axes → DuckDB."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sago_fast import defaults
from sago_fast.cli.options import CacheDirOpt, OptionalDbOpt, OptionalDeviceOpt

if TYPE_CHECKING:
    from sago_fast.run import RunConfig
    from sago_fast.run.pipeline import RunResult


def run_command(
    model: Annotated[
        list[str] | None,
        typer.Option(
            "--model",
            "-m",
            help="Checkpoint directory, training-run folder (checkpoint-N/, step-N/, ...), LoRA adapter folder, "
            ".gguf file or hub id (repeatable).",
        ),
    ] = None,
    base: Annotated[
        str | None,
        typer.Option(
            "--base",
            help="Base model of the LoRA adapters among --model (default: each adapter's base_model_name_or_path).",
        ),
    ] = None,
    dataset: Annotated[
        list[str] | None, typer.Option("--dataset", "-d", help="Built-in suite or data file (repeatable).")
    ] = None,
    db: OptionalDbOpt = None,
    families: Annotated[
        list[str] | None, typer.Option("--families", "-F", help="Families to use (repeatable; default all).")
    ] = None,
    variants_per_family: Annotated[
        int | None,
        typer.Option(
            "--variants-per-family",
            "-k",
            help=f"Variants per family (default {defaults.VARIANTS_PER_FAMILY}).",
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="First N examples of each dataset.")] = None,
    device: OptionalDeviceOpt = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help=f"Variant seed (default {defaults.SEED}).")
    ] = None,
    max_new_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-new-tokens",
            help=f"Generation tasks: tokens generated at most (default {defaults.MAX_NEW_TOKENS}).",
        ),
    ] = None,
    stop: Annotated[
        list[str] | None,
        typer.Option(
            "--stop",
            help=f"Generation tasks: stop string (repeatable; default {', '.join(map(repr, defaults.STOP))}).",
        ),
    ] = None,
    no_stats: Annotated[
        bool, typer.Option("--no-stats", help="Skip the statistics at the end (run `sago stats` later).")
    ] = False,
    executor: Annotated[
        str | None,
        typer.Option(
            "--executor",
            help=f"local or ray (extra sago_fast[ray]; RAY_ADDRESS joins a cluster); default {defaults.EXECUTOR}.",
        ),
    ] = None,
    shard: Annotated[
        str | None,
        typer.Option(
            "--shard", help="i/N: evaluate every N-th unit from the i-th (job arrays); needs --shard-dir."
        ),
    ] = None,
    shard_dir: Annotated[
        Path | None,
        typer.Option(
            "--shard-dir", help="Folder for the Parquet unit folders of --shard (merge with `sago merge`)."
        ),
    ] = None,
    answer_mode: Annotated[
        str | None,
        typer.Option(
            "--answer-mode",
            help="Multiple choice: cloze (option text, lm-eval acc), cloze_norm (per character, lm-eval "
            f"acc_norm) or letter (the option label, MMLU/HELM); default {defaults.ANSWER_MODE}. All modes "
            "are stored.",
        ),
    ] = None,
    chat_template: Annotated[
        str | None,
        typer.Option(
            "--chat-template",
            help="none (plain prompts) or auto (the tokenizer's chat template when it has one); default "
            f"{defaults.CHAT_TEMPLATE}.",
        ),
    ] = None,
    system_prompt: Annotated[
        str | None, typer.Option("--system-prompt", help="System turn (or first paragraph) of every prompt.")
    ] = None,
    num_fewshot: Annotated[
        int | None,
        typer.Option(
            "--num-fewshot",
            help=f"Demonstrations per prompt, never the example itself (default {defaults.NUM_FEWSHOT}).",
        ),
    ] = None,
    fewshot_from: Annotated[
        str | None,
        typer.Option(
            "--fewshot-from",
            help="Data file (a train/dev split) the demonstrations come from (default: the dataset).",
        ),
    ] = None,
    field: Annotated[
        list[str] | None,
        typer.Option(
            "--field",
            help="Data files: NAME=SOURCE field mapping (repeatable), e.g. question=question.stem, "
            "answer_offset=1.",
        ),
    ] = None,
    chunk_memory_mb: Annotated[
        float | None,
        typer.Option(
            "--chunk-memory-mb",
            help="Each unit is answered and committed in chunks of examples whose next-token and hidden-state "
            f"arrays fit in this many MB (default {defaults.CHUNK_MEMORY_MB}).",
        ),
    ] = None,
    sample_memory_mb: Annotated[
        float | None,
        typer.Option(
            "--sample-memory-mb",
            help="kNN instability and CKA keep example activations up to this many MB, then use a seeded "
            f"sample of examples (default {defaults.SAMPLE_MEMORY_MB}).",
        ),
    ] = None,
    precision: Annotated[
        float | None,
        typer.Option(
            "--precision",
            help="Sequential units: visit examples in a seeded random order and stop once every followed "
            "metric's anytime-valid 95% confidence sequence has this half-width (in the metric's units).",
        ),
    ] = None,
    budget: Annotated[
        int | None,
        typer.Option(
            "--budget", help="At most this many examples per (model, dataset), in the seeded visiting order."
        ),
    ] = None,
    until_separated: Annotated[
        bool,
        typer.Option(
            "--until-separated",
            help="With --precision H: the models advance together and each unit stops once its comparisons "
            "with the neighbouring models (run order) are settled: for every followed metric, the sign of "
            "the paired difference known or its anytime-valid half-width within H.",
        ),
    ] = False,
    config: Annotated[
        Path | None, typer.Option("--config", help="YAML file with the same settings; options override it.")
    ] = None,
    cache_dir: CacheDirOpt = None,
) -> None:
    from sago_fast.run import RunConfig, run
    from sago_fast.run.pipeline import UnitsFailedError

    given: dict[str, Any] = {
        "models": tuple(model or ()),
        "datasets": tuple(dataset or ()),
        "db": db,
        "families": tuple(families) if families else None,
        "variants_per_family": variants_per_family,
        "limit": limit,
        "device": device,
        "seed": seed,
        "cache_dir": cache_dir,
        "max_new_tokens": max_new_tokens,
        "stats": False if no_stats else None,
        "executor": executor,
        "shard": shard,
        "shard_dir": shard_dir,
        "answer_mode": answer_mode,
        "chat_template": chat_template,
        "system_prompt": system_prompt,
        "num_fewshot": num_fewshot,
        "fewshot_from": fewshot_from,
        "fields": tuple(field) if field else None,
        "chunk_memory_mb": chunk_memory_mb,
        "sample_memory_mb": sample_memory_mb,
        "base": base,
        "precision": precision,
        "budget": budget,
        "until_separated": until_separated or None,
        "stop": tuple(s.replace("\\n", "\n").replace("\\t", "\t") for s in stop) if stop else None,
    }
    if config is not None:
        run_config = RunConfig.from_yaml(config, **given)
    else:
        run_config = RunConfig(**{k: v for k, v in given.items() if v is not None})
    try:
        result = run(run_config, light_start=True)
    except UnitsFailedError as exc:  # what did run is shown before the error line
        if exc.result is not None and (exc.result.units or exc.result.skipped):
            _print_result(exc.result, run_config)
        raise
    _print_result(result, run_config)


def _print_result(result: RunResult, run_config: RunConfig) -> None:
    """The run summary (the units in the results file), why sequential units stopped, and the run line."""
    from sago_fast.cli.query import render_table
    from sago_fast.store import Store
    from sago_fast.store.queries import summary_rows
    from sago_fast.store.reads import RunReads

    if result.db_path is None:
        typer.echo(f"{result.describe()}; shard {run_config.shard} -> {result.shard_dir}")
        return
    with Store(result.db_path, read_only=True) as store:
        columns, rows = summary_rows(store, result.run_id)
        reads = RunReads(store, result.run_id)
        sequential, separations = reads.sequential_units(), reads.separations()
    typer.echo(render_table(columns, rows))
    if sequential.rows:
        typer.echo("\nsequential units (why each stopped; see confidence_sequences):")
        typer.echo(render_table(sequential.columns, sequential.rows))
    if separations.rows:
        typer.echo("\ncomparisons of neighbouring models (b - a; see comparison_sequences):")
        typer.echo(render_table(separations.columns, separations.rows))
    typer.echo(f"\n{result.describe()} -> {Path(result.db_path).resolve()}")
