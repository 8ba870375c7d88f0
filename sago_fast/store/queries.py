"""Named queries over the results schema: the run summary, and every query the report and the statistics read
(parameterised; names and values are never interpolated).

The run summary's columns are the metric catalogue's headline metrics (:mod:`sago_fast.axes.catalogue`),
axis by axis, so the summary, the statistics and the report always show the same metrics.
"""

from __future__ import annotations

from typing import Any

from sago_fast.axes.catalogue import headline_specs
from sago_fast.store.store import Store


def summary_sql() -> tuple[str, dict[str, Any]]:
    """Per model × dataset: canonical accuracy beside every headline metric, each the mean over examples of
    its ``item_scores`` value: the same number ``model_scores``, the report and ``checkpoint_changes``
    estimate (a layer-wise metric's item value is its mean over layers at mean pooling, see
    :func:`sago_fast.run.chunk.layer_item_scores`). Metric names are parameters; column names are
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
    SELECT o.model_id, o.dataset_id, avg(o.correct::INT) AS accuracy
    FROM outputs o JOIN variants v ON v.dataset_id = o.dataset_id AND v.variant_id = o.variant_id
    WHERE o.run_id = $run AND v.is_canonical AND o.replicate = 0
    GROUP BY ALL
), items AS (
    SELECT model_id, dataset_id, {item_select}
    FROM item_scores WHERE run_id = $run
    GROUP BY ALL
)
SELECT m.model AS model, acc.dataset_id AS dataset, round(accuracy, 3) AS accuracy, {", ".join(selected)}
FROM acc JOIN items USING (model_id, dataset_id) JOIN m USING (model_id)
ORDER BY dataset, model
"""
    return sql, params


def summary_rows(store: Store, run_id: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The run summary ``sago run`` and ``sago demo`` print."""
    sql, params = summary_sql()
    return store.query(sql, {**params, "run": run_id})


# -- the report (sago_fast.report.data) ---------------------------------------------------------------------
REPORT_RUN = (
    "SELECT run_id, created_at, command, sago_version, device, provider, status FROM runs WHERE run_id = $run"
)
REPORT_HEADLINE = """
WITH names AS (SELECT model_id, model FROM model_names), ds AS (SELECT dataset_id, any_value(name) AS dataset FROM datasets GROUP BY 1),
picked AS (
    SELECT DISTINCT dataset_id, axis, metric, family FROM rankings
    WHERE run_id = $run AND source = (SELECT any_value(name) FROM datasets d WHERE d.dataset_id = rankings.dataset_id)
      AND axis <> 'worst_axis'
)
SELECT n.model, ds.dataset, s.axis, s.metric, s.estimate, s.ci_low, s.ci_high, s.p_adjusted, s.n_items, s.test
FROM model_scores s JOIN picked p USING (dataset_id, axis, metric)
JOIN names n USING (model_id) JOIN ds USING (dataset_id)
WHERE s.run_id = $run AND s.family IS NOT DISTINCT FROM p.family
ORDER BY ds.dataset, s.axis, n.model
"""
REPORT_TESTS = "SELECT DISTINCT test FROM model_scores WHERE run_id = $run AND test IS NOT NULL ORDER BY 1"
REPORT_TRAJECTORIES = """
WITH ds AS (SELECT dataset_id, any_value(name) AS dataset FROM datasets GROUP BY 1),
picked AS (
    SELECT DISTINCT dataset_id, axis, metric, family FROM rankings
    WHERE run_id = $run AND source = (SELECT any_value(name) FROM datasets d WHERE d.dataset_id = rankings.dataset_id)
      AND axis <> 'worst_axis'
)
SELECT regexp_extract(t.training_run, '[^/]+$') AS training_run, ds.dataset, t.axis, t.metric, t.step,
       t.estimate, t.ci_low, t.ci_high
FROM training_trajectories t JOIN picked p USING (dataset_id, axis, metric) JOIN ds USING (dataset_id)
WHERE t.run_id = $run AND t.family IS NOT DISTINCT FROM p.family
ORDER BY 1, 2, 3, 5
"""
REPORT_CHANGES = """
SELECT regexp_extract(c.training_run, '[^/]+$') AS training_run, d.name AS dataset, c.axis, c.metric,
       c.step_from, c.step_to, c.change, c.ci_low, c.ci_high, c.p_adjusted
FROM checkpoint_changes c JOIN (SELECT dataset_id, any_value(name) AS name FROM datasets GROUP BY 1) d USING (dataset_id)
WHERE c.run_id = $run AND c.significant
ORDER BY 1, 2, 3, 5
"""
REPORT_SEQUENCES = """
SELECT m.name AS model, d.name AS dataset, s.metric, s.n_examples, s.half_width, s.precision
FROM confidence_sequences s
JOIN (SELECT model_id, any_value(model) AS name FROM model_names GROUP BY 1) m USING (model_id)
JOIN (SELECT dataset_id, any_value(name) AS name FROM datasets GROUP BY 1) d USING (dataset_id)
WHERE s.run_id = $run
ORDER BY 1, 2, 3, 4
"""
REPORT_LAYERS = """
        SELECT any_value(m.model), any_value(d.name), l.layer, avg(l.value)
        FROM layer_scores l JOIN model_names m USING (model_id) JOIN datasets d USING (dataset_id)
        WHERE l.run_id = $run AND l.metric = 'dispersion' AND l.family IS NULL AND l.pooling = 'mean'
        GROUP BY l.model_id, l.dataset_id, l.layer ORDER BY 1, 2, 3
        """
REPORT_RANKS = """
        SELECT r.axis, r.metric, r.source, any_value(m.model), any_value(r.rank)
        FROM rankings r JOIN model_names m USING (model_id)
        WHERE r.run_id = $run AND strpos(r.source, '/') = 0
        GROUP BY r.axis, r.metric, r.source, r.model_id ORDER BY 1, 3, 4
        """
REPORT_REVERSALS = """
        WITH n AS (SELECT model_id, model FROM model_names),
        ds AS (SELECT dataset_id, any_value(name) AS dataset FROM datasets GROUP BY 1)
        SELECT r.axis, r.metric, a.model AS model_a, b.model AS model_b, da.dataset AS dataset_a,
               round(r.difference_a, 4) AS difference_a, round(r.p_adjusted_a, 4) AS p_adjusted_a,
               db.dataset AS dataset_b, round(r.difference_b, 4) AS difference_b, round(r.p_adjusted_b, 4) AS p_adjusted_b
        FROM rank_reversals r JOIN n a ON a.model_id = r.model_a JOIN n b ON b.model_id = r.model_b
        JOIN ds da ON da.dataset_id = r.dataset_a JOIN ds db ON db.dataset_id = r.dataset_b
        WHERE r.run_id = $run ORDER BY 1, 2, 3, 4
        """
REPORT_AGREEMENT = """
        SELECT axis, metric, statistic, source_a, source_b, round(value, 3) AS value, round(ci_low, 3) AS ci_low,
               round(ci_high, 3) AS ci_high, round(p_value, 4) AS p_value, n_models
        FROM ranking_agreement WHERE run_id = $run AND (source_a IS NULL OR strpos(source_a, '/') = 0)
        ORDER BY statistic DESC, axis, source_a, source_b
        """
REPORT_CORRELATIONS = """
        SELECT any_value(m.model), any_value(d.name), c.axis_a, c.axis_b,
               any_value(c.spearman), any_value(c.partial)
        FROM axis_correlations c JOIN model_names m USING (model_id) JOIN datasets d USING (dataset_id)
        WHERE c.run_id = $run GROUP BY c.model_id, c.dataset_id, c.axis_a, c.axis_b ORDER BY 1, 2, 3, 4
        """
REPORT_SIGNIFICANCE = """
        WITH n AS (SELECT model_id, model FROM model_names),
        ds AS (SELECT dataset_id, any_value(name) AS dataset FROM datasets GROUP BY 1)
        SELECT n.model, ds.dataset, s.axis, s.metric, s.family, round(s.estimate, 4) AS estimate,
               round(s.ci_low, 4) AS ci_low, round(s.ci_high, 4) AS ci_high, s.test,
               round(s.null_value, 4) AS null_value, round(s.effect, 4) AS effect, s.p_value, s.p_adjusted, s.n_items
        FROM model_scores s JOIN n USING (model_id) JOIN ds USING (dataset_id)
        WHERE s.run_id = $run AND s.p_value IS NOT NULL
        ORDER BY ds.dataset, s.axis, s.metric, s.family NULLS FIRST, n.model
        """
REPORT_UNSTABLE = """
        SELECT s.model_id, s.dataset_id, s.example_id, s.value,
               any_value(m.model), any_value(d.name), any_value(e.question)
        FROM item_scores s JOIN model_names m USING (model_id) JOIN datasets d USING (dataset_id)
        JOIN examples e ON e.dataset_id = s.dataset_id AND e.example_id = s.example_id
        WHERE s.run_id = $run AND s.axis = 'generation' AND s.metric = 'answer_disagreement' AND s.family IS NULL
        GROUP BY s.model_id, s.dataset_id, s.example_id, s.value
        QUALIFY row_number() OVER (PARTITION BY s.dataset_id ORDER BY s.value DESC, s.example_id, s.model_id) <= $per_dataset
        ORDER BY s.value DESC, s.dataset_id, s.example_id, s.model_id LIMIT $limit
        """
REPORT_EXAMPLE_VARIANTS = """
            SELECT v.family, v.prompt, o.answer, o.correct, coalesce(o.generation, '') AS generation
            FROM outputs o JOIN variants v ON v.dataset_id = o.dataset_id AND v.variant_id = o.variant_id
            WHERE o.run_id = $run AND o.model_id = $model AND o.dataset_id = $dataset AND o.example_id = $example
              AND o.replicate = 0
            ORDER BY v.is_canonical DESC, v.variant_id
            """
REPORT_N_DATASETS = "SELECT count(DISTINCT dataset_id) FROM item_scores WHERE run_id = $run"


# -- the statistics (sago_fast.stats.data) ------------------------------------------------------------------
STATS_LATEST_DONE_RUN = "SELECT run_id FROM runs WHERE status IN ('done', 'unscored') ORDER BY created_at DESC, run_id DESC LIMIT 1"
STATS_RUN_EXISTS = "SELECT count(*) FROM runs WHERE run_id = $run"
STATS_ITEM_SCORES = "SELECT model_id, dataset_id, axis, metric, family, example_id, value FROM item_scores WHERE run_id = $run"
STATS_MODEL_NAMES = "SELECT model_id, model FROM model_names"
STATS_CHECKPOINT_POSITIONS = """
        SELECT model_id, training_run, step FROM checkpoint_names
        WHERE run_id = $run AND training_run IS NOT NULL AND step IS NOT NULL
        ORDER BY training_run, step, checkpoint
        """
STATS_N_CHANGES = "SELECT count(*) FROM checkpoint_changes WHERE run_id = $run"
# each sequential unit's followed metrics after its last chunk: the confidence sequences the stats use
STATS_FINAL_SEQUENCES = """
        SELECT s.model_id, s.dataset_id, s.metric, s.lower, s.upper, s.n_values
        FROM confidence_sequences s
        JOIN (SELECT unit_id, max(chunk) AS chunk FROM confidence_sequences WHERE run_id = $run GROUP BY 1) last
          ON last.unit_id = s.unit_id AND last.chunk = s.chunk
        WHERE s.run_id = $run
        ORDER BY 1, 2, 3
        """
# --until-separated: each comparison's paired sequence (model_b - model_a) after its last growth
STATS_FINAL_COMPARISONS = """
        SELECT dataset_id, model_a, model_b, metric, lower, upper FROM comparison_sequences
        WHERE run_id = $run
        QUALIFY row_number() OVER (PARTITION BY dataset_id, model_a, model_b, metric ORDER BY n_examples DESC) = 1
        ORDER BY 1, 2, 3, 4
        """
STATS_SEQUENTIAL_UNITS = """
        SELECT m.name AS model, d.name AS dataset, u.stop_reason, u.n_examples AS examples_used,
               u.examples_available
        FROM units u
        JOIN (SELECT model_id, any_value(model) AS name FROM model_names GROUP BY 1) m USING (model_id)
        JOIN (SELECT dataset_id, any_value(name) AS name FROM datasets GROUP BY 1) d USING (dataset_id)
        WHERE u.run_id = $run AND u.stop_reason IS NOT NULL
        ORDER BY 1, 2
        """
# --until-separated: each comparison of neighbouring models, every followed metric, after its last chunk
STATS_SEPARATIONS = """
        WITH last AS (
            SELECT *, row_number() OVER (
                PARTITION BY dataset_id, model_a, model_b, metric ORDER BY n_examples DESC) AS latest
            FROM comparison_sequences WHERE run_id = $run),
        names AS (SELECT model_id, any_value(model) AS name FROM model_names GROUP BY 1)
        SELECT a.name AS model_a, b.name AS model_b, d.name AS dataset, l.metric, l.n_examples,
               round(l.difference, 4) AS difference, round(l.lower, 4) AS lower, round(l.upper, 4) AS upper,
               CASE WHEN l.sign > 0 THEN 'model_b higher' WHEN l.sign < 0 THEN 'model_a higher'
                    WHEN l.settled THEN 'within precision' ELSE 'open' END AS verdict
        FROM last l JOIN names a ON a.model_id = l.model_a JOIN names b ON b.model_id = l.model_b
        JOIN (SELECT dataset_id, any_value(name) AS name FROM datasets GROUP BY 1) d USING (dataset_id)
        WHERE l.latest = 1
        ORDER BY 3, 1, 2, 4
        """
STATS_CHANGES = """
        SELECT regexp_extract(c.training_run, '[^/]+$') AS training_run, d.name AS dataset, c.axis, c.metric,
               c.step_from, c.step_to, c.mean_from, c.mean_to, c.change, c.ci_low, c.ci_high, c.p_adjusted
        FROM checkpoint_changes c JOIN (SELECT dataset_id, any_value(name) AS name FROM datasets GROUP BY 1) d
          USING (dataset_id)
        WHERE c.run_id = $run AND c.significant
        ORDER BY 1, 2, 3, 4, 5
        """
STATS_DATASET_NAMES = "SELECT dataset_id, any_value(name) FROM datasets GROUP BY 1"
STATS_REPLICATE_DISTANCE = """
        SELECT model_id, dataset_id, example_id, avg(value) FROM layer_scores
        WHERE run_id = $run AND metric = 'replicate_distance' AND pooling = 'mean' GROUP BY ALL
        """
STATS_VARIANT_COUNTS = """
        SELECT o.dataset_id, o.example_id, v.family, bool_or(v.meaning_preserving), count(DISTINCT o.variant_id)
        FROM outputs o JOIN variants v ON v.dataset_id = o.dataset_id AND v.variant_id = o.variant_id
        WHERE o.run_id = $run AND o.replicate = 0 GROUP BY ALL
        """
STATS_CANONICAL_OUTPUTS = """
        SELECT o.model_id, o.dataset_id, o.example_id, o.replicate, o.correct, o.p_gold, o.option_logprobs
        FROM outputs o JOIN variants v ON v.dataset_id = o.dataset_id AND v.variant_id = o.variant_id
        WHERE o.run_id = $run AND v.is_canonical
        """
