"""Statistics of a run: bootstrap CIs, tests of the mean against replicate noise / tolerance / chance,
model comparisons, rankings and their agreement across datasets, axis correlations (scipy throughout).

The heavy modules load on first use, so that reading :class:`StatsConfig` (the CLI's defaults) does not
import scipy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sago_fast.stats.settings import StatsConfig

if TYPE_CHECKING:
    from sago_fast.stats.compute import StatsTables, compute_stats
    from sago_fast.stats.data import RunData, load_run

__all__ = ["RunData", "StatsConfig", "StatsResult", "StatsTables", "compute_stats", "load_run", "run_stats"]

_LAZY = {
    "StatsTables": "sago_fast.stats.compute",
    "compute_stats": "sago_fast.stats.compute",
    "RunData": "sago_fast.stats.data",
    "load_run": "sago_fast.stats.data",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class StatsResult:
    run_id: str
    rows: dict[str, int]  # rows written per table


def run_stats(
    db: str | os.PathLike[str], run_id: str | None = None, config: StatsConfig = StatsConfig()
) -> StatsResult:
    """Compute every statistic of ``run_id`` (default: the latest finished run) and store it, replacing
    earlier statistics of that run in one transaction (running it twice gives the same tables)."""
    from sago_fast import defaults
    from sago_fast.stats.compute import StatsTables, compute_stats
    from sago_fast.stats.data import latest_run, load_run
    from sago_fast.store import Store
    from sago_fast.store.store import check_can_store

    if Path(db).is_file():  # before any work: statistics that could not be stored are not computed
        check_can_store(db, "the statistics")
    with Store(db, create=False) as store:  # the file is held while reading and writing, not computing
        store.limit_memory(defaults.STATS_DB_MEMORY)
        store.mark_dead_runs()
        run = run_id or latest_run(store)
        data = load_run(store, run)
    tables = compute_stats(data, config)
    rows = {}
    with Store(db, create=False) as store, store.transaction():
        for table in StatsTables.TABLES:
            store.delete_rows(table, run_id=run)
            columns = dict(getattr(tables, table))
            rows[table] = store.insert(table, columns) if columns else 0
        store.query(  # a run whose units were all done is done once it has its statistics
            "UPDATE runs SET status = 'done' WHERE run_id = $run AND status = 'unscored'", {"run": run}
        )
    return StatsResult(run, rows)
