"""The run summary's query over the results schema (parameterised; names and values are never interpolated).
What the statistics, the report and the CLI read is in :mod:`sago_fast.store.reads`, one method per read.

The run summary's columns are the metric catalogue's headline metrics (:mod:`sago_fast.axes.catalogue`),
axis by axis, so the summary, the statistics and the report always show the same metrics.
"""

from __future__ import annotations

from typing import Any

from sago_fast.axes.catalogue import headline_specs
from sago_fast.store.store import Store


def summary_sql() -> tuple[str, dict[str, Any]]:
    """Per model × dataset: canonical accuracy beside every headline metric, each the mean over examples of
    its ``item_scores`` value (and ``prompts_cut``: outputs whose prompt was cut from the left to fit the
    model, lm-eval's rule): the same number ``model_scores``, the report and ``checkpoint_changes``
    estimate (a layer-wise metric's item value is its mean over layers at mean pooling, see
    :func:`sago_fast.units.chunk.layer_item_scores`). Metric names are parameters; column names are
    catalogue names."""
    params: dict[str, Any] = {}
    item_columns, selected = [], []
    for i, spec in enumerate(headline_specs()):  # the columns after model, dataset and accuracy
        params[f"m{i}"] = spec.name
        family = "family IS NULL"
        if spec.family is not None:
            params[f"f{i}"] = spec.family
            family = f"family = $f{i}"
        item_columns.append(  # NaN (undefined) values are left out: no defined value prints NULL, never nan
            f"avg(value) FILTER (WHERE metric = $m{i} AND {family} AND NOT isnan(value)) AS {spec.name}"
        )
        selected.append(f"round({spec.name}, {spec.digits}) AS {spec.name}")
    item_select = ", ".join(item_columns) or "NULL AS no_item_metric"
    sql = f"""
WITH m AS (
    SELECT model_id, any_value(n.model) AS model
    FROM models JOIN model_names n USING (model_id) GROUP BY model_id
), acc AS (
    SELECT o.model_id, o.dataset_id, avg(o.correct::INT) FILTER (WHERE v.is_canonical) AS accuracy,
           count(*) FILTER (WHERE o.prompt_tokens_cut > 0) AS prompts_cut
    FROM outputs o JOIN variants v ON v.dataset_id = o.dataset_id AND v.variant_id = o.variant_id
    WHERE o.run_id = $run AND o.replicate = 0
    GROUP BY ALL
), items AS (
    SELECT model_id, dataset_id, {item_select}
    FROM item_scores WHERE run_id = $run
    GROUP BY ALL
)
SELECT m.model AS model, acc.dataset_id AS dataset, round(accuracy, 3) AS accuracy, {", ".join(selected)},
       prompts_cut
FROM acc JOIN items USING (model_id, dataset_id) JOIN m USING (model_id)
ORDER BY dataset, model
"""
    return sql, params


def summary_rows(store: Store, run_id: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The run summary ``sago run`` and ``sago demo`` print (``prompts_cut`` only when a prompt was cut)."""
    sql, params = summary_sql()
    columns, rows = store.query(sql, {**params, "run": run_id})
    if rows and not any(row[-1] for row in rows):
        return columns[:-1], [row[:-1] for row in rows]
    return columns, rows
