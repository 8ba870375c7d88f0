"""Compute the statistics of a run (CIs, significance, model comparisons, rankings, axis correlations)."""

from __future__ import annotations

from typing import Annotated

import typer

from sago_fast.cli.options import DbOpt


def stats_command(
    db: DbOpt,
    run_id: Annotated[
        str | None, typer.Option("--run", help="Run id (default: the latest finished run).")
    ] = None,
    n_resamples: Annotated[int, typer.Option("--resamples", help="Bootstrap draws and permutations.")] = 2000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of every resampling stream.")] = 0,
    alpha: Annotated[float, typer.Option("--alpha", help="Significance level for reversals.")] = 0.05,
    tolerance: Annotated[
        float, typer.Option("--tolerance", help="Stated tolerance for discrete instability metrics.")
    ] = 0.05,
) -> None:
    from sago_fast.errors import InputError
    from sago_fast.stats import StatsConfig, run_stats

    if not db.is_file():
        raise InputError(f"{db}: no such database")
    try:
        config = StatsConfig(n_resamples=n_resamples, seed=seed, alpha=alpha, tolerance=tolerance)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    result = run_stats(db, run_id, config)
    written = ", ".join(f"{table} {n}" for table, n in result.rows.items())
    typer.echo(f"statistics of run {result.run_id}: {written} rows -> {db}")
