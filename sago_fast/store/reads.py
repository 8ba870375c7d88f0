"""Named reads of a results file: what the statistics, the report and the CLI read, one method per read.

Every method runs one parameterised query (names and values are never interpolated) and returns named
rows: dicts keyed by column (:data:`Row`), or a :class:`Table` (column names and rows) for tables shown
as they are. Callers never unpack positional tuples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sago_fast.store.store import Store

Row = dict[str, Any]  # one result row, by column name


@dataclass
class Table:
    """A table shown as it is (a sortable HTML table, a printed table): column names and rows."""

    columns: list[str]
    rows: list[tuple[Any, ...]]

    def records(self) -> list[Row]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


def cell_text(value: Any, digits: int = 6) -> str:
    """A cell as printed or shown: NULL, a float to ``digits`` significant digits, else its text."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


class RunReads:
    """The reads of one run (``run_id``) of ``store``."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id

    def _table(self, sql: str, **params: Any) -> Table:
        bound = {name: value for name, value in {"run": self.run_id, **params}.items() if f"${name}" in sql}
        columns, rows = self.store.query(sql, bound)
        return Table(columns, rows)

    def _rows(self, sql: str, **params: Any) -> list[Row]:
        return self._table(sql, **params).records()

    def exists(self) -> bool:
        return bool(self._rows("SELECT count(*) AS n FROM runs WHERE run_id = $run")[0]["n"])

    def run_info(self) -> Row | None:
        """run_id, created_at, command, sago_version, device, provider, status."""
        rows = self._rows("""
                SELECT run_id, created_at, command, sago_version, device, provider, status FROM runs WHERE run_id = $run
            """)
        return rows[0] if rows else None

    def designs(self) -> list[str]:
        """How the run's finished units chose their cells: ``full`` or ``sampled m=3`` (units written before
        designs existed: full), one entry per distinct design."""
        rows = self._rows("""
                SELECT DISTINCT coalesce(design, 'full') AS design, families_per_item AS m
                FROM units WHERE run_id = $run ORDER BY 1, 2
            """)
        return [r["design"] if r["m"] is None else f"{r['design']} m={r['m']}" for r in rows]

    def design_advice(self) -> Table:
        """Per model, dataset and headline metric: its variance components and the best m (design_advice)."""
        return self._table("""
                SELECT m.model, d.dataset, a.metric, a.n_items AS items,
                       round(a.between_item_variance, 6) AS between_items,
                       round(a.within_item_variance, 6) AS within_items,
                       a.families, a.best_m, round(a.cost_at_best, 3) AS cost_at_best_m
                FROM design_advice a JOIN model_names m USING (model_id) JOIN dataset_names d USING (dataset_id)
                WHERE a.run_id = $run ORDER BY d.dataset, m.model, a.axis, a.metric
            """)

    def model_names(self) -> dict[str, str]:
        return {r["model_id"]: r["model"] for r in self._rows("SELECT model_id, model FROM model_names")}

    def dataset_names(self) -> dict[str, str]:
        return {
            r["dataset_id"]: r["name"]
            for r in self._rows("SELECT dataset_id, dataset AS name FROM dataset_names")
        }

    def n_changes(self) -> int:
        return int(self._rows("SELECT count(*) AS n FROM checkpoint_changes WHERE run_id = $run")[0]["n"])

    def prompts_cut(self) -> Row:
        """n: ``outputs`` rows whose prompt was cut from the left to fit the model (replicates: those of
        the replicate pass among them); most: the most tokens cut."""
        return self._rows("""
                SELECT count(*) AS n, count(*) FILTER (WHERE replicate > 0) AS replicates,
                coalesce(max(prompt_tokens_cut), 0) AS most
                FROM outputs WHERE run_id = $run AND prompt_tokens_cut > 0
            """)[0]

    def n_datasets(self) -> int:
        return int(
            self._rows("SELECT count(DISTINCT dataset_id) AS n FROM item_scores WHERE run_id = $run")[0]["n"]
        )

    def tests(self) -> list[str]:
        return [
            r["test"]
            for r in self._rows("""
                SELECT DISTINCT test FROM model_scores WHERE run_id = $run AND test IS NOT NULL ORDER BY 1
            """)
        ]

    def unstable(self, limit: int, per_dataset: int) -> list[Row]:
        """model_id, dataset_id, example_id, value, model, dataset, question of the examples with the
        highest answer disagreement."""
        return self._rows(
            """
                SELECT s.model_id, s.dataset_id, s.example_id, s.value,
                any_value(m.model) AS model, any_value(d.name) AS dataset, any_value(e.question) AS question
                FROM item_scores s JOIN model_names m USING (model_id) JOIN datasets d USING (dataset_id)
                JOIN examples e ON e.dataset_id = s.dataset_id AND e.example_id = s.example_id
                WHERE s.run_id = $run AND s.axis = 'generation' AND s.metric = 'answer_disagreement' AND s.family IS NULL
                GROUP BY s.model_id, s.dataset_id, s.example_id, s.value
                QUALIFY row_number() OVER (PARTITION BY s.dataset_id ORDER BY s.value DESC, s.example_id, s.model_id) <= $per_dataset
                ORDER BY s.value DESC, s.dataset_id, s.example_id, s.model_id LIMIT $limit
            """,
            limit=limit,
            per_dataset=per_dataset,
        )

    def example_variants(self, model_id: str, dataset_id: str, example_id: str) -> list[Row]:
        """family, prompt, answer, correct, generation of one example's variants (canonical first)."""
        return self._rows(
            """
                SELECT v.family, v.prompt, o.answer, o.correct, coalesce(o.generation, '') AS generation
                FROM outputs o JOIN variants v ON v.dataset_id = o.dataset_id AND v.variant_id = o.variant_id
                WHERE o.run_id = $run AND o.model_id = $model AND o.dataset_id = $dataset AND o.example_id = $example
                AND o.replicate = 0
                ORDER BY v.is_canonical DESC, v.variant_id
            """,
            model=model_id,
            dataset=dataset_id,
            example=example_id,
        )

    def checkpoint_positions(self) -> list[Row]:
        """model_id, training_run, step, in step order."""
        return self._rows(
            """
                SELECT model_id, training_run, step FROM checkpoint_names
                WHERE run_id = $run AND training_run IS NOT NULL AND step IS NOT NULL
                ORDER BY training_run, step, checkpoint
            """
        )

    def _arrow(self, sql: str, **params: Any) -> Any:
        bound = {name: value for name, value in {"run": self.run_id, **params}.items() if f"${name}" in sql}
        return self.store.query_arrow(sql, bound)

    def example_ids(self) -> list[str]:
        """Every example id with an output in the run, sorted."""
        table = self._arrow("SELECT DISTINCT example_id FROM outputs WHERE run_id = $run ORDER BY 1")
        return sorted(table.column("example_id").to_pylist())

    def scored_models(self) -> list[str]:
        """The model ids with outputs in the run, sorted."""
        rows = self._rows("SELECT DISTINCT model_id FROM outputs WHERE run_id = $run ORDER BY 1")
        return [row["model_id"] for row in rows]

    def item_score_lists(self, model_id: str) -> Any:
        """One model's item scores as a ``pyarrow.Table``: dataset_id, axis, metric, family, example_ids,
        values, one row per figure, its examples and values as two lists gathered in DuckDB (NULL values
        left out): a run of millions of item scores is read model by model with no Python object per score."""
        return self._arrow(
            """
                SELECT dataset_id, axis, metric, family,
                       list(example_id ORDER BY example_id) AS example_ids, list(value ORDER BY example_id) AS "values"
                FROM item_scores WHERE run_id = $run AND model_id = $model AND value IS NOT NULL GROUP BY ALL
            """,
            model=model_id,
        )

    def canonical_runs(self, model_id: str) -> Any:
        """One model's canonical outputs as a ``pyarrow.Table``, one row an example that has its main run:
        dataset_id, example_id, correct, p_gold, option_logprobs (replicate 0), p_gold_1, option_logprobs_1
        (the replicate re-run of the same prompt, NULL where there is none)."""
        return self._arrow(
            """
                SELECT o.dataset_id, o.example_id,
                       any_value(o.correct) FILTER (WHERE o.replicate = 0) AS correct,
                       any_value(o.p_gold) FILTER (WHERE o.replicate = 0) AS p_gold,
                       any_value(o.option_logprobs) FILTER (WHERE o.replicate = 0) AS option_logprobs,
                       any_value(o.p_gold) FILTER (WHERE o.replicate = 1) AS p_gold_1,
                       any_value(o.option_logprobs) FILTER (WHERE o.replicate = 1) AS option_logprobs_1
                FROM outputs o JOIN variants v ON v.dataset_id = o.dataset_id AND v.variant_id = o.variant_id
                WHERE o.run_id = $run AND o.model_id = $model AND v.is_canonical
                GROUP BY ALL HAVING bool_or(o.replicate = 0)
            """,
            model=model_id,
        )

    def replicate_distances(self, model_id: str) -> Any:
        """One model's replicate pair distances as a ``pyarrow.Table``: dataset_id, example_id, value (the
        mean over layers)."""
        return self._arrow(
            """
                SELECT dataset_id, example_id, avg(value) AS value FROM layer_scores
                WHERE run_id = $run AND model_id = $model AND metric = 'replicate_distance' AND pooling = 'mean'
                GROUP BY ALL
            """,
            model=model_id,
        )

    def variant_counts(self) -> list[Row]:
        """dataset_id, example_id, family, preserving, n (variants rendered), inclusion (the cell's inclusion
        probability: below 1 for a sampled design's drawn family). Every model renders the same variants:
        they are counted once, not per model."""
        return self._rows(
            """
                WITH rendered AS (
                    SELECT DISTINCT dataset_id, example_id, variant_id FROM outputs WHERE run_id = $run AND replicate = 0
                ), cells AS (
                    SELECT dataset_id, example_id, family, any_value(inclusion) AS inclusion
                    FROM design_cells WHERE run_id = $run GROUP BY ALL
                )
                SELECT r.dataset_id, r.example_id, v.family, bool_or(v.meaning_preserving) AS preserving,
                       count(DISTINCT r.variant_id) AS n, coalesce(any_value(c.inclusion), 1.0) AS inclusion
                FROM rendered r JOIN variants v ON v.dataset_id = r.dataset_id AND v.variant_id = r.variant_id
                LEFT JOIN cells c ON c.dataset_id = r.dataset_id AND c.example_id = r.example_id AND c.family = v.family
                GROUP BY r.dataset_id, r.example_id, v.family
            """
        )

    def final_sequences(self) -> list[Row]:
        """model_id, dataset_id, metric, lower, upper, n_values after each unit's last chunk."""
        return self._rows(
            """
                SELECT s.model_id, s.dataset_id, s.metric, s.lower, s.upper, s.n_values
                FROM confidence_sequences s
                JOIN (SELECT unit_id, max(chunk) AS chunk FROM confidence_sequences WHERE run_id = $run GROUP BY 1) last
                ON last.unit_id = s.unit_id AND last.chunk = s.chunk
                WHERE s.run_id = $run
                ORDER BY 1, 2, 3
            """
        )

    def final_comparisons(self) -> list[Row]:
        """dataset_id, model_a, model_b, metric, lower, upper of each comparison at its end."""
        return self._rows(
            """
                SELECT dataset_id, model_a, model_b, metric, lower, upper FROM comparison_sequences
                WHERE run_id = $run
                QUALIFY row_number() OVER (PARTITION BY dataset_id, model_a, model_b, metric ORDER BY n_examples DESC) = 1
                ORDER BY 1, 2, 3, 4
            """
        )

    def layers(self) -> list[Row]:
        """model, dataset, layer, value: dispersion per layer (mean pooling)."""
        return self._rows(
            """
                SELECT any_value(m.model) AS model, any_value(d.name) AS dataset, l.layer, avg(l.value) AS value
                FROM layer_scores l JOIN model_names m USING (model_id) JOIN datasets d USING (dataset_id)
                WHERE l.run_id = $run AND l.metric = 'dispersion' AND l.family IS NULL AND l.pooling = 'mean'
                GROUP BY l.model_id, l.dataset_id, l.layer ORDER BY 1, 2, 3
            """
        )

    def ranks(self) -> list[Row]:
        """axis, metric, source, model, rank."""
        return self._rows(
            """
                SELECT r.axis, r.metric, r.source, any_value(m.model) AS model, any_value(r.rank) AS rank
                FROM rankings r JOIN model_names m USING (model_id)
                WHERE r.run_id = $run AND strpos(r.source, '/') = 0
                GROUP BY r.axis, r.metric, r.source, r.model_id ORDER BY 1, 3, 4
            """
        )

    def correlations(self) -> list[Row]:
        """model, dataset, axis_a, axis_b, spearman, partial."""
        return self._rows(
            """
                SELECT any_value(m.model) AS model, any_value(d.name) AS dataset, c.axis_a, c.axis_b,
                any_value(c.spearman) AS spearman, any_value(c.partial) AS partial
                FROM axis_correlations c JOIN model_names m USING (model_id) JOIN datasets d USING (dataset_id)
                WHERE c.run_id = $run GROUP BY c.model_id, c.dataset_id, c.axis_a, c.axis_b ORDER BY 1, 2, 3, 4
            """
        )

    def trajectories(self) -> list[Row]:
        """training_run, dataset, axis, metric, step, estimate, ci_low, ci_high (headline metrics)."""
        return self._rows(
            """
                WITH ds AS (SELECT dataset_id, dataset FROM dataset_names),
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
        )

    def sequences(self) -> list[Row]:
        """model, dataset, metric, n_examples, half_width, precision of every sequential chunk."""
        return self._rows(
            """
                SELECT m.name AS model, d.name AS dataset, s.metric, s.n_examples, s.half_width, s.precision
                FROM confidence_sequences s
                JOIN (SELECT model_id, model AS name FROM model_names) m USING (model_id)
                JOIN (SELECT dataset_id, dataset AS name FROM dataset_names) d USING (dataset_id)
                WHERE s.run_id = $run
                ORDER BY 1, 2, 3, 4
            """
        )

    def headline(self) -> Table:
        """Each model × dataset × axis: its headline metric's estimate and CI."""
        return self._table(
            """
                WITH names AS (SELECT model_id, model FROM model_names), ds AS (SELECT dataset_id, dataset FROM dataset_names),
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
        )

    def reversals(self) -> Table:
        """Significant rank reversals between datasets."""
        return self._table(
            """
                WITH n AS (SELECT model_id, model FROM model_names),
                ds AS (SELECT dataset_id, dataset FROM dataset_names)
                SELECT r.axis, r.metric, a.model AS model_a, b.model AS model_b, da.dataset AS dataset_a,
                round(r.difference_a, 4) AS difference_a, round(r.p_adjusted_a, 4) AS p_adjusted_a,
                db.dataset AS dataset_b, round(r.difference_b, 4) AS difference_b, round(r.p_adjusted_b, 4) AS p_adjusted_b
                FROM rank_reversals r JOIN n a ON a.model_id = r.model_a JOIN n b ON b.model_id = r.model_b
                JOIN ds da ON da.dataset_id = r.dataset_a JOIN ds db ON db.dataset_id = r.dataset_b
                WHERE r.run_id = $run ORDER BY 1, 2, 3, 4
            """
        )

    def agreement(self) -> Table:
        """Ranking agreement between datasets (Kendall's W, tau)."""
        return self._table(
            """
                SELECT axis, metric, statistic, source_a, source_b, round(value, 3) AS value, round(ci_low, 3) AS ci_low,
                round(ci_high, 3) AS ci_high, round(p_value, 4) AS p_value, n_models
                FROM ranking_agreement WHERE run_id = $run AND (source_a IS NULL OR strpos(source_a, '/') = 0)
                ORDER BY statistic DESC, axis, source_a, source_b
            """
        )

    def significance(self) -> Table:
        """Every test of model_scores."""
        return self._table(
            """
                WITH n AS (SELECT model_id, model FROM model_names),
                ds AS (SELECT dataset_id, dataset FROM dataset_names)
                SELECT n.model, ds.dataset, s.axis, s.metric, s.family, round(s.estimate, 4) AS estimate,
                round(s.ci_low, 4) AS ci_low, round(s.ci_high, 4) AS ci_high, s.test,
                round(s.null_value, 4) AS null_value, round(s.effect, 4) AS effect, s.p_value, s.p_adjusted, s.n_items
                FROM model_scores s JOIN n USING (model_id) JOIN ds USING (dataset_id)
                WHERE s.run_id = $run AND s.p_value IS NOT NULL
                ORDER BY ds.dataset, s.axis, s.metric, s.family NULLS FIRST, n.model
            """
        )

    def changes(self) -> Table:
        """Significant consecutive-checkpoint changes, as `sago stats` prints them and the report shows them."""
        return self._table(
            """
                SELECT regexp_extract(c.training_run, '[^/]+$') AS training_run, d.dataset, c.axis, c.metric,
                c.step_from, c.step_to, c.mean_from, c.mean_to, c.change, c.ci_low, c.ci_high, c.p_adjusted
                FROM checkpoint_changes c JOIN dataset_names d USING (dataset_id)
                WHERE c.run_id = $run AND c.significant
                ORDER BY 1, 2, 3, 4, 5
            """
        )

    def sequential_units(self) -> Table:
        """Each sequential unit: model, dataset, stop_reason, examples_used, examples_available."""
        return self._table(
            """
                SELECT m.name AS model, d.name AS dataset, u.stop_reason, u.n_examples AS examples_used,
                u.examples_available
                FROM units u
                JOIN (SELECT model_id, model AS name FROM model_names) m USING (model_id)
                JOIN (SELECT dataset_id, dataset AS name FROM dataset_names) d USING (dataset_id)
                WHERE u.run_id = $run AND u.stop_reason IS NOT NULL
                ORDER BY 1, 2
            """
        )

    def separations(self) -> Table:
        """Each --until-separated comparison and metric, with its verdict."""
        return self._table(
            """
                WITH last AS (
                SELECT *, row_number() OVER (
                PARTITION BY dataset_id, model_a, model_b, metric ORDER BY n_examples DESC) AS latest
                FROM comparison_sequences WHERE run_id = $run),
                names AS (SELECT model_id, model AS name FROM model_names)
                SELECT a.name AS model_a, b.name AS model_b, d.name AS dataset, l.metric, l.n_examples,
                round(l.difference, 4) AS difference, round(l.lower, 4) AS lower, round(l.upper, 4) AS upper,
                CASE WHEN l.sign > 0 THEN 'model_b higher' WHEN l.sign < 0 THEN 'model_a higher'
                WHEN l.settled THEN 'within precision' ELSE 'open' END AS verdict
                FROM last l JOIN names a ON a.model_id = l.model_a JOIN names b ON b.model_id = l.model_b
                JOIN (SELECT dataset_id, dataset AS name FROM dataset_names) d USING (dataset_id)
                WHERE l.latest = 1
                ORDER BY 3, 1, 2, 4
            """
        )


def latest_running_run(store: Store) -> str | None:
    """The newest run still being written that has committed scores, or None."""
    _, rows = store.query("""
            SELECT run_id FROM runs WHERE status = 'running' AND run_id IN (SELECT run_id FROM item_scores) ORDER BY created_at DESC, run_id DESC LIMIT 1
        """)
    return str(rows[0][0]) if rows else None


def latest_finished_run(store: Store) -> str | None:
    """The newest run whose units are all done (``done`` or ``unscored``), or None."""
    _, rows = store.query("""
            SELECT run_id FROM runs WHERE status IN ('done', 'unscored') ORDER BY created_at DESC, run_id DESC LIMIT 1
        """)
    return str(rows[0][0]) if rows else None
