"""Statistics of a run: bootstrap CIs, tests against replicate noise / tolerance / chance, model
comparisons, rankings and their agreement across datasets, axis correlations (scipy throughout)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from sago_fast.stats.compute import StatsTables, compute_stats
from sago_fast.stats.data import RunData, latest_run, load_run
from sago_fast.stats.methods import StatsConfig

__all__ = ["RunData", "StatsConfig", "StatsResult", "StatsTables", "compute_stats", "load_run", "run_stats"]


@dataclass(frozen=True)
class StatsResult:
    run_id: str
    rows: dict[str, int]  # rows written per table


def run_stats(
    db: str | os.PathLike[str], run_id: str | None = None, config: StatsConfig = StatsConfig()
) -> StatsResult:
    """Compute every statistic of ``run_id`` (default: the latest finished run) and store it, replacing
    earlier statistics of that run in one transaction (running it twice gives the same tables)."""
    from sago_fast.store import Store

    with Store(db) as store:
        run = run_id or latest_run(store)
        tables = compute_stats(load_run(store, run), config)
        rows = {}
        with store.transaction():
            for table in StatsTables.TABLES:
                store.delete_rows(table, run_id=run)
                columns = dict(getattr(tables, table))
                rows[table] = store.insert(table, columns) if columns else 0
    return StatsResult(run, rows)
