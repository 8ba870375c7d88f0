"""What the report shows, read from the store (one run) with its named reads (:mod:`sago_fast.store.reads`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sago_fast.checkpoints.resolve import natural_key
from sago_fast.store import Store
from sago_fast.store.reads import Row, RunReads, Table

__all__ = ["ReportData", "Table", "load_report_data", "natural_key"]


def _empty() -> Table:
    return Table([], [])


@dataclass
class ReportData:
    """Named rows (:data:`~sago_fast.store.reads.Row`) and tables of one run, as :class:`RunReads` returns
    them."""

    run_id: str | None
    run_info: dict[str, Any] = field(default_factory=dict)
    headline: Table = field(default_factory=_empty)  # model × dataset × axis metric + CI
    tests: list[str] = field(default_factory=list)  # every model_scores.test of the run (how CIs were made)
    layers: list[Row] = field(default_factory=list)  # model, dataset, layer, value (dispersion)
    ranks: list[Row] = field(default_factory=list)  # axis, metric, source, model, rank
    reversals: Table = field(default_factory=_empty)
    agreement: Table = field(default_factory=_empty)
    correlations: list[Row] = field(default_factory=list)  # model, dataset, axis_a, axis_b, spearman, partial
    unstable: list[dict[str, Any]] = field(default_factory=list)  # most unstable examples, with variants
    significance: Table = field(default_factory=_empty)
    # training_run, dataset, axis, metric, step, estimate, ci_low, ci_high (headline metrics)
    trajectories: list[Row] = field(default_factory=list)
    changes: Table = field(default_factory=_empty)  # significant consecutive changes
    sequential: Table = field(default_factory=_empty)  # sequential units: why they stopped
    separations: Table = field(default_factory=_empty)  # --until-separated comparisons
    # model, dataset, metric, n_examples, half_width, precision (each sequential unit's chunks)
    sequences: list[Row] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.headline.rows


def load_report_data(store: Store, run_id: str | None, n_unstable: int = 10) -> ReportData:
    data = ReportData(run_id)
    if run_id is None:
        return data
    reads = RunReads(store, run_id)
    data.run_info = reads.run_info() or {}
    if data.run_info:
        data.run_info["designs"] = ", ".join(reads.designs()) or "full"
    data.headline = reads.headline()
    data.tests = reads.tests()
    data.layers = reads.layers()
    data.ranks = reads.ranks()
    data.reversals = reads.reversals()
    data.agreement = reads.agreement()
    data.correlations = reads.correlations()
    data.significance = _with_p(reads.significance(), "p_value", "p_adjusted")
    data.trajectories = reads.trajectories()
    data.changes = _with_p(reads.changes(), "p_adjusted")
    data.sequential = reads.sequential_units()
    data.separations = reads.separations()
    data.sequences = reads.sequences()
    data.unstable = _unstable_examples(reads, n_unstable)
    return data


def _with_p(table: Table, *columns: str) -> Table:
    """``table`` with its p-value columns printed (2 significant digits below 1e-3, else 4 decimals)."""
    at = {table.columns.index(c) for c in columns}
    rows = [tuple(_p(v) if i in at else v for i, v in enumerate(row)) for row in table.rows]
    return Table(table.columns, rows)


def _p(value: float | None) -> str | None:
    return None if value is None else f"{value:.2g}" if value < 1e-3 else f"{value:.4f}"


def _unstable_examples(reads: RunReads, limit: int) -> list[dict[str, Any]]:
    """Per dataset, the examples with the highest answer disagreement (any model; ``limit`` shared over the
    datasets), with every variant's answer."""
    per_dataset = max(1, -(-limit // max(reads.n_datasets(), 1)))
    out = []
    for row in reads.unstable(limit, per_dataset):
        variants = reads.example_variants(row["model_id"], row["dataset_id"], row["example_id"])
        out.append(
            {
                "model": row["model"],
                "dataset": row["dataset"],
                "example_id": row["example_id"],
                "question": row["question"],
                "answer_disagreement": row["value"],
                "variants": variants,
            }
        )
    return out
