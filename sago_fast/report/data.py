"""What the report shows, read from the store (one run) with the named queries of :mod:`sago_fast.store.queries`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sago_fast.checkpoints.resolve import natural_key
from sago_fast.store import Store, queries

__all__ = ["ReportData", "Table", "load_report_data", "natural_key"]


@dataclass
class Table:
    """A sortable HTML table: column names and rows."""

    columns: list[str]
    rows: list[tuple[Any, ...]]


@dataclass
class ReportData:
    run_id: str | None
    run_info: dict[str, Any] = field(default_factory=dict)
    headline: Table = field(default_factory=lambda: Table([], []))  # model × dataset × axis metric + CI
    tests: list[str] = field(default_factory=list)  # every model_scores.test of the run (how CIs were made)
    layers: list[tuple[str, str, int, float]] = field(
        default_factory=list
    )  # model, dataset, layer, dispersion
    ranks: list[tuple[str, str, str, str, float]] = field(
        default_factory=list
    )  # axis, metric, source, model, rank
    reversals: Table = field(default_factory=lambda: Table([], []))
    agreement: Table = field(default_factory=lambda: Table([], []))
    correlations: list[tuple[str, str, str, str, float | None, float | None]] = field(default_factory=list)
    unstable: list[dict[str, Any]] = field(default_factory=list)  # most unstable examples, with variants
    significance: Table = field(default_factory=lambda: Table([], []))
    # training run, dataset, axis, metric, step, estimate, ci_low, ci_high (headline metrics)
    trajectories: list[tuple[str, str, str, str, int, float, float | None, float | None]] = field(
        default_factory=list
    )
    changes: Table = field(default_factory=lambda: Table([], []))  # significant consecutive changes
    sequential: Table = field(default_factory=lambda: Table([], []))  # sequential units: why they stopped
    separations: Table = field(default_factory=lambda: Table([], []))  # --until-separated comparisons
    # model, dataset, metric, examples visited, half-width, precision (each sequential unit's chunks)
    sequences: list[tuple[str, str, str, int, float, float | None]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.headline.rows


def load_report_data(store: Store, run_id: str | None, n_unstable: int = 10) -> ReportData:
    data = ReportData(run_id)
    if run_id is None:
        return data
    params = {"run": run_id}
    _, info = store.query(
        queries.REPORT_RUN,
        params,
    )
    if info:
        keys = ("run_id", "created_at", "command", "sago_version", "device", "provider", "status")
        data.run_info = dict(zip(keys, info[0], strict=True))
    columns, rows = store.query(queries.REPORT_HEADLINE, params)
    data.headline = Table(columns, rows)
    data.tests = [row[0] for row in store.query(queries.REPORT_TESTS, params)[1]]
    _, data.layers = store.query(  # type: ignore[assignment]
        queries.REPORT_LAYERS,
        params,
    )
    _, data.ranks = store.query(  # type: ignore[assignment]
        queries.REPORT_RANKS,
        params,
    )
    columns, rows = store.query(
        queries.REPORT_REVERSALS,
        params,
    )
    data.reversals = Table(columns, rows)
    columns, rows = store.query(
        queries.REPORT_AGREEMENT,
        params,
    )
    data.agreement = Table(columns, rows)
    _, data.correlations = store.query(  # type: ignore[assignment]
        queries.REPORT_CORRELATIONS,
        params,
    )
    columns, rows = store.query(
        queries.REPORT_SIGNIFICANCE,
        params,
    )
    data.significance = Table(columns, [(*r[:11], _p(r[11]), _p(r[12]), r[13]) for r in rows])
    _, data.trajectories = store.query(queries.REPORT_TRAJECTORIES, params)  # type: ignore[assignment]
    columns, rows = store.query(queries.REPORT_CHANGES, params)
    data.changes = Table(columns, [(*r[:9], _p(r[9])) for r in rows])
    columns, rows = store.query(queries.STATS_SEQUENTIAL_UNITS, params)
    data.sequential = Table(columns, rows)
    columns, rows = store.query(queries.STATS_SEPARATIONS, params)
    data.separations = Table(columns, rows)
    _, data.sequences = store.query(queries.REPORT_SEQUENCES, params)  # type: ignore[assignment]
    data.unstable = _unstable_examples(store, run_id, n_unstable)
    return data


def _p(value: float | None) -> str | None:
    return None if value is None else f"{value:.2g}" if value < 1e-3 else f"{value:.4f}"


def _unstable_examples(store: Store, run_id: str, limit: int) -> list[dict[str, Any]]:
    """Per dataset, the examples with the highest answer disagreement (any model; ``limit`` shared over the
    datasets), with every variant's answer."""
    n_datasets = store.query(queries.REPORT_N_DATASETS, {"run": run_id})[1][0][0]
    params = {"run": run_id, "limit": limit, "per_dataset": max(1, -(-limit // max(n_datasets, 1)))}
    _, top = store.query(
        queries.REPORT_UNSTABLE,
        params,
    )
    out = []
    for model_id, dataset_id, example_id, value, model, dataset, question in top:
        _, variants = store.query(
            queries.REPORT_EXAMPLE_VARIANTS,
            {"run": run_id, "model": model_id, "dataset": dataset_id, "example": example_id},
        )
        out.append(
            {
                "model": model,
                "dataset": dataset,
                "example_id": example_id,
                "question": question,
                "answer_disagreement": value,
                "variants": variants,
            }
        )
    return out
