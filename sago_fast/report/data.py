"""What the report shows, read from the store with parameterised SQL (one run)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sago_fast.checkpoints.resolve import natural_key
from sago_fast.store import Store

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

    @property
    def empty(self) -> bool:
        return not self.headline.rows


HEADLINE_SQL = """
WITH names AS (SELECT model_id, model FROM model_names), ds AS (SELECT dataset_id, any_value(name) AS dataset FROM datasets GROUP BY 1),
picked AS (
    SELECT DISTINCT dataset_id, axis, metric, family FROM rankings
    WHERE run_id = $run AND source = (SELECT any_value(name) FROM datasets d WHERE d.dataset_id = rankings.dataset_id)
      AND axis <> 'worst_axis'
)
SELECT n.model, ds.dataset, s.axis, s.metric, s.estimate, s.ci_low, s.ci_high, s.p_adjusted, s.n_items
FROM model_scores s JOIN picked p USING (dataset_id, axis, metric)
JOIN names n USING (model_id) JOIN ds USING (dataset_id)
WHERE s.run_id = $run AND s.family IS NOT DISTINCT FROM p.family
ORDER BY ds.dataset, s.axis, n.model
"""


def load_report_data(store: Store, run_id: str | None, n_unstable: int = 10) -> ReportData:
    data = ReportData(run_id)
    if run_id is None:
        return data
    params = {"run": run_id}
    _, info = store.query(
        "SELECT run_id, created_at, command, sago_version, device, provider, status FROM runs WHERE run_id = $run",
        params,
    )
    if info:
        keys = ("run_id", "created_at", "command", "sago_version", "device", "provider", "status")
        data.run_info = dict(zip(keys, info[0], strict=True))
    columns, rows = store.query(HEADLINE_SQL, params)
    data.headline = Table(columns, rows)
    _, data.layers = store.query(  # type: ignore[assignment]
        """
        SELECT any_value(m.model), any_value(d.name), l.layer, avg(l.value)
        FROM layer_scores l JOIN model_names m USING (model_id) JOIN datasets d USING (dataset_id)
        WHERE l.run_id = $run AND l.metric = 'dispersion' AND l.family IS NULL AND l.pooling = 'mean'
        GROUP BY l.model_id, l.dataset_id, l.layer ORDER BY 1, 2, 3
        """,
        params,
    )
    _, data.ranks = store.query(  # type: ignore[assignment]
        """
        SELECT r.axis, r.metric, r.source, any_value(m.model), any_value(r.rank)
        FROM rankings r JOIN model_names m USING (model_id)
        WHERE r.run_id = $run AND strpos(r.source, '/') = 0
        GROUP BY r.axis, r.metric, r.source, r.model_id ORDER BY 1, 3, 4
        """,
        params,
    )
    columns, rows = store.query(
        """
        WITH n AS (SELECT model_id, model FROM model_names),
        ds AS (SELECT dataset_id, any_value(name) AS dataset FROM datasets GROUP BY 1)
        SELECT r.axis, r.metric, a.model AS model_a, b.model AS model_b, da.dataset AS dataset_a,
               round(r.difference_a, 4) AS difference_a, round(r.p_adjusted_a, 4) AS p_adjusted_a,
               db.dataset AS dataset_b, round(r.difference_b, 4) AS difference_b, round(r.p_adjusted_b, 4) AS p_adjusted_b
        FROM rank_reversals r JOIN n a ON a.model_id = r.model_a JOIN n b ON b.model_id = r.model_b
        JOIN ds da ON da.dataset_id = r.dataset_a JOIN ds db ON db.dataset_id = r.dataset_b
        WHERE r.run_id = $run ORDER BY 1, 2, 3, 4
        """,
        params,
    )
    data.reversals = Table(columns, rows)
    columns, rows = store.query(
        """
        SELECT axis, metric, statistic, source_a, source_b, round(value, 3) AS value, round(ci_low, 3) AS ci_low,
               round(ci_high, 3) AS ci_high, round(p_value, 4) AS p_value, n_models
        FROM ranking_agreement WHERE run_id = $run AND (source_a IS NULL OR strpos(source_a, '/') = 0)
        ORDER BY statistic DESC, axis, source_a, source_b
        """,
        params,
    )
    data.agreement = Table(columns, rows)
    _, data.correlations = store.query(  # type: ignore[assignment]
        """
        SELECT any_value(m.model), any_value(d.name), c.axis_a, c.axis_b,
               any_value(c.spearman), any_value(c.partial)
        FROM axis_correlations c JOIN model_names m USING (model_id) JOIN datasets d USING (dataset_id)
        WHERE c.run_id = $run GROUP BY c.model_id, c.dataset_id, c.axis_a, c.axis_b ORDER BY 1, 2, 3, 4
        """,
        params,
    )
    columns, rows = store.query(
        """
        WITH n AS (SELECT model_id, model FROM model_names),
        ds AS (SELECT dataset_id, any_value(name) AS dataset FROM datasets GROUP BY 1)
        SELECT n.model, ds.dataset, s.axis, s.metric, s.family, round(s.estimate, 4) AS estimate,
               round(s.ci_low, 4) AS ci_low, round(s.ci_high, 4) AS ci_high, s.test,
               round(s.null_value, 4) AS null_value, round(s.effect, 4) AS effect, s.p_value, s.p_adjusted, s.n_items
        FROM model_scores s JOIN n USING (model_id) JOIN ds USING (dataset_id)
        WHERE s.run_id = $run AND s.p_value IS NOT NULL
        ORDER BY ds.dataset, s.axis, s.metric, s.family NULLS FIRST, n.model
        """,
        params,
    )
    data.significance = Table(columns, [(*r[:11], _p(r[11]), _p(r[12]), r[13]) for r in rows])
    data.unstable = _unstable_examples(store, run_id, n_unstable)
    return data


def _p(value: float | None) -> str | None:
    return None if value is None else f"{value:.2g}" if value < 1e-3 else f"{value:.4f}"


def _unstable_examples(store: Store, run_id: str, limit: int) -> list[dict[str, Any]]:
    """Per dataset, the examples with the highest answer disagreement (any model; ``limit`` shared over the
    datasets), with every variant's answer."""
    n_datasets = store.query(
        "SELECT count(DISTINCT dataset_id) FROM item_scores WHERE run_id = $run", {"run": run_id}
    )[1][0][0]
    params = {"run": run_id, "limit": limit, "per_dataset": max(1, -(-limit // max(n_datasets, 1)))}
    _, top = store.query(
        """
        SELECT s.model_id, s.dataset_id, s.example_id, s.value,
               any_value(m.model), any_value(d.name), any_value(e.question)
        FROM item_scores s JOIN model_names m USING (model_id) JOIN datasets d USING (dataset_id)
        JOIN examples e ON e.dataset_id = s.dataset_id AND e.example_id = s.example_id
        WHERE s.run_id = $run AND s.axis = 'generation' AND s.metric = 'answer_disagreement' AND s.family IS NULL
        GROUP BY s.model_id, s.dataset_id, s.example_id, s.value
        QUALIFY row_number() OVER (PARTITION BY s.dataset_id ORDER BY s.value DESC, s.example_id, s.model_id) <= $per_dataset
        ORDER BY s.value DESC, s.dataset_id, s.example_id, s.model_id LIMIT $limit
        """,
        params,
    )
    out = []
    for model_id, dataset_id, example_id, value, model, dataset, question in top:
        _, variants = store.query(
            """
            SELECT v.family, v.prompt, o.answer, o.correct, coalesce(o.generation, '') AS generation
            FROM outputs o JOIN variants v ON v.dataset_id = o.dataset_id AND v.variant_id = o.variant_id
            WHERE o.run_id = $run AND o.model_id = $model AND o.dataset_id = $dataset AND o.example_id = $example
              AND o.replicate = 0
            ORDER BY v.is_canonical DESC, v.variant_id
            """,
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
