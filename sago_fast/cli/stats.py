"""Compute the statistics of a run (CIs, significance, model comparisons, rankings, axis correlations)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sago_fast.cli.options import DbOpt
from sago_fast.stats.settings import StatsConfig

DEFAULTS = StatsConfig()  # the help texts and defaults below read it: the defaults are stated once


def stats_command(
    db: DbOpt,
    run_id: Annotated[
        str | None, typer.Option("--run", help="Run id (default: the latest finished run).")
    ] = None,
    n_resamples: Annotated[
        int, typer.Option("--resamples", help="Bootstrap draws and permutations.")
    ] = DEFAULTS.n_resamples,
    seed: Annotated[int, typer.Option("--seed", help="Seed of every resampling stream.")] = DEFAULTS.seed,
    confidence: Annotated[
        float, typer.Option("--confidence", help="Level of the confidence intervals.")
    ] = DEFAULTS.confidence,
    alpha: Annotated[
        float, typer.Option("--alpha", help="Significance level for reversals.")
    ] = DEFAULTS.alpha,
    tolerance: Annotated[
        float, typer.Option("--tolerance", help="Stated tolerance for discrete instability metrics.")
    ] = DEFAULTS.tolerance,
    sesoi: Annotated[
        list[str] | None,
        typer.Option(
            "--sesoi",
            help="METRIC=VALUE: the smallest effect of practical interest a replicate-null metric is tested "
            "against (default: the metric catalogue's; repeatable).",
        ),
    ] = None,
    all_pairs: Annotated[
        bool,
        typer.Option(
            "--all-pairs",
            help="Compare every pair of models (default: every pair up to 12 models; above that, a training "
            "run's consecutive checkpoints and the pairs among the other models and each run's last one).",
        ),
    ] = DEFAULTS.all_pairs,
) -> None:
    from sago_fast.errors import InputError
    from sago_fast.stats import run_stats

    if not db.is_file():
        raise InputError(f"{db}: no such database")
    config = StatsConfig(
        n_resamples=n_resamples,
        seed=seed,
        confidence=confidence,
        alpha=alpha,
        tolerance=tolerance,
        sesoi=tuple(_sesoi(item) for item in sesoi or ()),
        all_pairs=all_pairs,
    )
    result = run_stats(db, run_id, config)
    written = ", ".join(f"{table} {n}" for table, n in result.rows.items())
    typer.echo(f"statistics of run {result.run_id}: {written} rows -> {db}")
    _print_design(db, result.run_id)
    _print_still_running(db, result.run_id)
    _print_prompts_cut(db, result.run_id)
    _print_sequential(db, result.run_id)
    _print_changes(db, result.run_id, alpha)


def _print_design(db: Path, run_id: str) -> None:
    """The run's design, and how the next budget is best spent (design_advice)."""
    from sago_fast.cli.query import render_table
    from sago_fast.cli.run import say_design
    from sago_fast.store import Store
    from sago_fast.store.reads import RunReads

    with Store(db, read_only=True) as store:
        reads = RunReads(store, run_id)
        designs, advice = reads.designs(), reads.design_advice()
    say_design(designs)
    if advice.rows:
        typer.echo(
            "\nvariance between items and within them (between families), and the families per item m that "
            "gives each headline metric the narrowest interval per token (--design sampled --families-per-item "
            "m; cost_at_best_m: the tokens it needs for the full design's precision, as a share; see "
            "design_advice):"
        )
        typer.echo(render_table(advice.columns, advice.rows))


def _print_still_running(db: Path, run_id: str) -> None:
    """For a run still being written: that these statistics cover what is committed so far."""
    from sago_fast.store.status import run_status

    (run,) = run_status(db, run_id)
    if run.status == "running":
        typer.echo(
            f"run {run_id} is still running: these statistics cover the {run.examples_done} examples committed "
            f"so far ({run.count('done') + run.count('stopped')} of {len(run.units)} units done); the run "
            "computes them again when it ends"
        )


def _print_prompts_cut(db: Path, run_id: str) -> None:
    """How many answers read a prompt cut to fit the model, if any."""
    from sago_fast.store import Store
    from sago_fast.store.reads import RunReads

    with Store(db, read_only=True) as store:
        cut = RunReads(store, run_id).prompts_cut()
    if cut["n"]:
        typer.echo(
            f"{cut['n']} outputs rows ({cut['replicates']} of them the replicate pass's) read a prompt cut from "
            f"the left to fit the model (lm-eval's rule; up to {cut['most']} tokens); see "
            "outputs.prompt_tokens_cut"
        )


def _print_sequential(db: Path, run_id: str) -> None:
    """The run's sequential units, if any: where their CIs come from, and why each stopped."""
    from sago_fast.cli.query import render_table
    from sago_fast.store import Store
    from sago_fast.store.reads import RunReads

    with Store(db, read_only=True) as store:
        reads = RunReads(store, run_id)
        sequential, separations = reads.sequential_units(), reads.separations()
    columns, rows = sequential.columns, sequential.rows
    if not rows:
        return
    typer.echo(
        f"\nsequential units ({len(rows)}): the CIs of their followed metrics in model_scores are the "
        "anytime-valid confidence sequences they stopped on (no fixed-n p-value); see confidence_sequences"
    )
    typer.echo(render_table(columns, rows))
    if separations.rows:
        typer.echo(
            "\ncomparisons of neighbouring models (--until-separated): the anytime-valid paired sequences "
            "of b - a they stopped on; see comparison_sequences"
        )
        typer.echo(render_table(separations.columns, separations.rows))


def _print_changes(db: Path, run_id: str, alpha: float) -> None:
    """The significant changes between consecutive checkpoints of the run's training runs, if any."""
    from sago_fast.cli.query import render_table
    from sago_fast.store import Store
    from sago_fast.store.reads import RunReads

    with Store(db, read_only=True) as store:
        reads = RunReads(store, run_id)
        if not reads.n_changes():
            return
        changes = reads.changes()
    columns, rows = changes.columns, changes.rows
    if not rows:
        typer.echo(
            f"\nover training: no significant change between consecutive checkpoints (BH, alpha {alpha})"
        )
        return
    settled = any(row["p_adjusted"] is None for row in changes.records())  # a sequence that excludes 0
    how = "; no p_adjusted: an --until-separated paired sequence that excludes 0" if settled else ""
    typer.echo(
        f"\nover training: significant changes between consecutive checkpoints (BH, alpha {alpha}{how})"
    )
    typer.echo(render_table(columns, rows))


def _sesoi(item: str) -> tuple[str, float]:
    """``METRIC=VALUE`` -> (metric, value), the metric checked against the catalogue's replicate nulls."""
    from sago_fast.axes.catalogue import CATALOGUE
    from sago_fast.errors import InputError

    name, sep, value = item.partition("=")
    replicate = sorted(n for n in CATALOGUE.names() if CATALOGUE.get(n).null == "replicate")
    if not sep or name not in replicate:
        raise InputError(f"--sesoi {item!r}: expected METRIC=VALUE with METRIC one of {', '.join(replicate)}")
    try:
        return name, float(value)
    except ValueError:
        raise InputError(f"--sesoi {item!r}: {value!r} is not a number") from None
