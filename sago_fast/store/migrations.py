"""Numbered schema migrations. The tables and columns are a public interface: only ever add migrations.

Conventions: VARCHAR ids (content hashes), no primary keys on large tables (DuckDB is 5x slower and
larger with them), lists as DuckDB LIST columns.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    sql: str


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "core SAGO tables",
        """
        CREATE TABLE runs (
            run_id VARCHAR NOT NULL,
            created_at TIMESTAMP NOT NULL,
            command VARCHAR,
            config_json VARCHAR,
            sago_version VARCHAR,
            versions_json VARCHAR,
            device VARCHAR,
            provider VARCHAR,
            status VARCHAR
        );
        CREATE TABLE models (
            model_id VARCHAR NOT NULL,
            checkpoint VARCHAR,
            model_type VARCHAR,
            n_layers INTEGER,
            d_model INTEGER,
            vocab_size INTEGER,
            export_key VARCHAR,
            dtype VARCHAR
        );
        CREATE TABLE datasets (
            dataset_id VARCHAR NOT NULL,
            name VARCHAR,
            source VARCHAR,
            task_type VARCHAR,
            n_examples INTEGER
        );
        CREATE TABLE examples (
            dataset_id VARCHAR NOT NULL,
            example_id VARCHAR NOT NULL,
            task_type VARCHAR,
            question VARCHAR,
            options VARCHAR[],
            answer_index INTEGER,
            answers VARCHAR[]
        );
        CREATE TABLE variants (
            dataset_id VARCHAR NOT NULL,
            example_id VARCHAR NOT NULL,
            variant_id VARCHAR NOT NULL,
            family VARCHAR,
            params_json VARCHAR,
            is_canonical BOOLEAN,
            meaning_preserving BOOLEAN,
            prompt VARCHAR,
            option_order INTEGER[]
        );
        CREATE TABLE outputs (
            run_id VARCHAR NOT NULL,
            model_id VARCHAR NOT NULL,
            dataset_id VARCHAR NOT NULL,
            example_id VARCHAR NOT NULL,
            variant_id VARCHAR NOT NULL,
            replicate INTEGER NOT NULL,
            n_prompt_tokens INTEGER,
            answer VARCHAR,
            answer_index INTEGER,
            correct BOOLEAN,
            option_logprobs DOUBLE[],
            p_gold DOUBLE,
            entropy DOUBLE,
            margin DOUBLE,
            top_token VARCHAR,
            top_logprob DOUBLE,
            generation VARCHAR
        );
        CREATE TABLE layer_scores (
            run_id VARCHAR NOT NULL,
            model_id VARCHAR NOT NULL,
            dataset_id VARCHAR NOT NULL,
            example_id VARCHAR NOT NULL,
            layer INTEGER NOT NULL,
            pooling VARCHAR,
            metric VARCHAR,
            family VARCHAR,
            value DOUBLE
        );
        CREATE TABLE item_scores (
            run_id VARCHAR NOT NULL,
            model_id VARCHAR NOT NULL,
            dataset_id VARCHAR NOT NULL,
            example_id VARCHAR NOT NULL,
            axis VARCHAR NOT NULL,
            metric VARCHAR NOT NULL,
            family VARCHAR,
            value DOUBLE
        );
        CREATE TABLE model_scores (
            run_id VARCHAR NOT NULL,
            model_id VARCHAR NOT NULL,
            dataset_id VARCHAR NOT NULL,
            axis VARCHAR NOT NULL,
            metric VARCHAR NOT NULL,
            family VARCHAR,
            estimate DOUBLE,
            ci_low DOUBLE,
            ci_high DOUBLE,
            p_value DOUBLE,
            p_adjusted DOUBLE,
            n_items INTEGER
        );
        """,
    ),
    Migration(
        2,
        "dataset-level scores (CKA per layer and family, between-example distance, ECE per family)",
        """
        CREATE TABLE dataset_scores (
            run_id VARCHAR NOT NULL,
            model_id VARCHAR NOT NULL,
            dataset_id VARCHAR NOT NULL,
            axis VARCHAR NOT NULL,
            metric VARCHAR NOT NULL,
            family VARCHAR,
            layer INTEGER,
            pooling VARCHAR,
            value DOUBLE
        );
        """,
    ),
    Migration(
        3,
        "statistics: tests behind model_scores, model comparisons, rankings and their agreement, axis correlations",
        """
        ALTER TABLE model_scores ADD COLUMN test VARCHAR;
        ALTER TABLE model_scores ADD COLUMN null_value DOUBLE;
        CREATE TABLE model_comparisons (
            run_id VARCHAR NOT NULL,
            dataset_id VARCHAR NOT NULL,
            axis VARCHAR NOT NULL,
            metric VARCHAR NOT NULL,
            model_a VARCHAR NOT NULL,
            model_b VARCHAR NOT NULL,
            test VARCHAR,
            mean_a DOUBLE,
            mean_b DOUBLE,
            difference DOUBLE,
            ci_low DOUBLE,
            ci_high DOUBLE,
            p_value DOUBLE,
            p_adjusted DOUBLE,
            n_items INTEGER
        );
        CREATE TABLE rankings (
            run_id VARCHAR NOT NULL,
            source VARCHAR NOT NULL,
            dataset_id VARCHAR NOT NULL,
            family VARCHAR,
            axis VARCHAR NOT NULL,
            metric VARCHAR NOT NULL,
            model_id VARCHAR NOT NULL,
            estimate DOUBLE,
            mean_rank DOUBLE,
            rank DOUBLE,
            friedman_stat DOUBLE,
            friedman_p DOUBLE,
            nemenyi_cd DOUBLE,
            n_items INTEGER
        );
        CREATE TABLE ranking_agreement (
            run_id VARCHAR NOT NULL,
            axis VARCHAR NOT NULL,
            metric VARCHAR NOT NULL,
            statistic VARCHAR NOT NULL,
            source_a VARCHAR,
            source_b VARCHAR,
            value DOUBLE,
            ci_low DOUBLE,
            ci_high DOUBLE,
            p_value DOUBLE,
            n_models INTEGER
        );
        CREATE TABLE rank_reversals (
            run_id VARCHAR NOT NULL,
            axis VARCHAR NOT NULL,
            metric VARCHAR NOT NULL,
            model_a VARCHAR NOT NULL,
            model_b VARCHAR NOT NULL,
            dataset_a VARCHAR NOT NULL,
            dataset_b VARCHAR NOT NULL,
            difference_a DOUBLE,
            difference_b DOUBLE,
            p_adjusted_a DOUBLE,
            p_adjusted_b DOUBLE
        );
        CREATE TABLE axis_correlations (
            run_id VARCHAR NOT NULL,
            model_id VARCHAR NOT NULL,
            dataset_id VARCHAR NOT NULL,
            axis_a VARCHAR NOT NULL,
            metric_a VARCHAR NOT NULL,
            axis_b VARCHAR NOT NULL,
            metric_b VARCHAR NOT NULL,
            spearman DOUBLE,
            spearman_p DOUBLE,
            partial DOUBLE,
            partial_p DOUBLE,
            p_adjusted DOUBLE,
            n_items INTEGER
        );
        """,
    ),
    Migration(
        4,
        "work units: one row per finished (model, dataset, shard) unit of a run, written with its results",
        """
        CREATE TABLE units (
            run_id VARCHAR NOT NULL,
            unit_id VARCHAR NOT NULL,
            model_id VARCHAR NOT NULL,
            dataset_id VARCHAR NOT NULL,
            shard INTEGER,
            checkpoint VARCHAR,
            status VARCHAR,
            n_examples INTEGER,
            n_variants INTEGER,
            accuracy DOUBLE,
            seconds DOUBLE,
            provider VARCHAR,
            finished_at TIMESTAMP
        );
        """,
    ),
    Migration(
        5,
        "real models: checkpoint source format and quantisation, answer modes, option labels, system prompts",
        """
        ALTER TABLE models ADD COLUMN source_format VARCHAR;
        ALTER TABLE models ADD COLUMN quantization VARCHAR;
        ALTER TABLE outputs ADD COLUMN answer_mode VARCHAR;
        ALTER TABLE variants ADD COLUMN option_labels VARCHAR[];
        ALTER TABLE variants ADD COLUMN system_prompt VARCHAR;
        CREATE TABLE mode_answers (
            run_id VARCHAR NOT NULL,
            model_id VARCHAR NOT NULL,
            dataset_id VARCHAR NOT NULL,
            example_id VARCHAR NOT NULL,
            variant_id VARCHAR NOT NULL,
            replicate INTEGER NOT NULL,
            answer_mode VARCHAR NOT NULL,
            answer_index INTEGER,
            correct BOOLEAN,
            p_gold DOUBLE,
            option_scores DOUBLE[],
            option_logprobs DOUBLE[]
        );
        """,
    ),
    Migration(
        6,
        "published benchmark formats: the reader each dataset was read with",
        """
        ALTER TABLE datasets ADD COLUMN reader VARCHAR;
        """,
    ),
    Migration(
        7,
        "model_names view: one short display name per model (the last part of its checkpoint path)",
        """
        CREATE VIEW model_names AS
        SELECT model_id, any_value(regexp_extract(checkpoint, '[^/]+$')) AS model FROM models GROUP BY 1;
        """,
    ),
    Migration(
        8,
        "tests of the mean: model_scores.effect (estimate beyond the null, in the metric's unit)",
        """
        ALTER TABLE model_scores ADD COLUMN effect DOUBLE;
        """,
    ),
    Migration(
        9,
        "streaming units: chunks committed as a unit runs (with their dataset-level partial state), "
        "the estimator of sampled unit-level figures, progress of unfinished units",
        """
        CREATE TABLE unit_chunks (
            run_id VARCHAR NOT NULL,
            unit_id VARCHAR NOT NULL,
            chunk INTEGER NOT NULL,
            model_id VARCHAR,
            dataset_id VARCHAR,
            example_ids VARCHAR[],
            n_examples INTEGER,
            n_variants INTEGER,
            n_canonical_correct INTEGER,
            seconds DOUBLE,
            finished_at TIMESTAMP,
            state BLOB
        );
        CREATE TABLE unit_estimators (
            run_id VARCHAR NOT NULL,
            model_id VARCHAR NOT NULL,
            dataset_id VARCHAR NOT NULL,
            metric VARCHAR NOT NULL,
            estimator VARCHAR,
            sample_size INTEGER,
            population INTEGER,
            seed INTEGER
        );
        ALTER TABLE units ADD COLUMN n_chunks INTEGER;
        CREATE VIEW unit_progress AS
        SELECT c.run_id, c.unit_id, any_value(c.model_id) AS model_id, any_value(c.dataset_id) AS dataset_id,
               count(*) AS chunks_done, sum(c.n_examples) AS examples_done,
               any_value(d.n_examples) AS n_examples,
               bool_or(u.status = 'done') IS TRUE AS done
        FROM unit_chunks c
        LEFT JOIN datasets d ON d.dataset_id = c.dataset_id
        LEFT JOIN units u ON u.run_id = c.run_id AND u.unit_id = c.unit_id
        GROUP BY c.run_id, c.unit_id;
        """,
    ),
    Migration(
        10,
        "checkpoints as users have them: training-run position, adapters' base, the shared graph; every "
        "name of a checkpoint; what changed between consecutive checkpoints; trajectories; quantisations",
        """
        ALTER TABLE models ADD COLUMN training_run VARCHAR;
        ALTER TABLE models ADD COLUMN step BIGINT;
        ALTER TABLE models ADD COLUMN tokens_seen BIGINT;
        ALTER TABLE models ADD COLUMN base_model_id VARCHAR;
        ALTER TABLE models ADD COLUMN graph_key VARCHAR;
        CREATE TABLE checkpoint_names (
            run_id VARCHAR NOT NULL,
            model_id VARCHAR NOT NULL,
            checkpoint VARCHAR NOT NULL,
            training_run VARCHAR,
            step BIGINT,
            tokens_seen BIGINT
        );
        CREATE TABLE checkpoint_changes (
            run_id VARCHAR NOT NULL,
            dataset_id VARCHAR NOT NULL,
            axis VARCHAR NOT NULL,
            metric VARCHAR NOT NULL,
            family VARCHAR,
            training_run VARCHAR NOT NULL,
            step_from BIGINT,
            step_to BIGINT,
            model_from VARCHAR,
            model_to VARCHAR,
            test VARCHAR,
            mean_from DOUBLE,
            mean_to DOUBLE,
            change DOUBLE,
            ci_low DOUBLE,
            ci_high DOUBLE,
            p_value DOUBLE,
            p_adjusted DOUBLE,
            significant BOOLEAN,
            n_items INTEGER
        );
        CREATE VIEW training_trajectories AS
        SELECT c.run_id, c.training_run, c.step, c.tokens_seen, c.checkpoint, s.model_id, s.dataset_id,
               s.axis, s.metric, s.family, s.estimate, s.ci_low, s.ci_high, s.n_items
        FROM checkpoint_names c JOIN model_scores s ON s.run_id = c.run_id AND s.model_id = c.model_id
        WHERE c.step IS NOT NULL;
        CREATE VIEW quantization_comparisons AS
        WITH m AS (
            SELECT model_id, any_value(graph_key) AS graph_key, any_value(quantization) AS quantization,
                   any_value(checkpoint) AS checkpoint,
                   -- bits per weight, roughly: full precision (no quantisation) 32, F16/BF16 16, Q8_0 8, Q4_1 4
                   coalesce(CASE WHEN any_value(quantization) IS NULL THEN 32
                                 WHEN upper(any_value(quantization)) LIKE '%F32' THEN 32
                                 WHEN upper(any_value(quantization)) LIKE '%F16' THEN 16
                                 ELSE TRY_CAST(regexp_extract(any_value(quantization), '([0-9]+)', 1) AS INTEGER) END, 0) AS bits
            FROM models WHERE base_model_id IS NULL GROUP BY model_id
        ), best AS (
            SELECT graph_key, max(bits) AS bits FROM m GROUP BY graph_key
        ), pairs AS (
            SELECT q.model_id AS quantized, r.model_id AS reference, q.quantization,
                   coalesce(r.quantization, 'full precision') AS reference_type,
                   q.checkpoint AS quantized_checkpoint, r.checkpoint AS reference_checkpoint
            FROM m q JOIN best b ON q.graph_key = b.graph_key
            JOIN m r ON r.graph_key = q.graph_key AND r.bits = b.bits AND r.model_id <> q.model_id
            WHERE q.bits < b.bits
        )
        SELECT c.run_id, c.dataset_id, c.axis, c.metric, p.quantization, p.reference_type,
               p.quantized_checkpoint, p.reference_checkpoint, p.quantized, p.reference,
               CASE WHEN c.model_a = p.quantized THEN c.mean_a ELSE c.mean_b END AS quantized_mean,
               CASE WHEN c.model_a = p.quantized THEN c.mean_b ELSE c.mean_a END AS reference_mean,
               CASE WHEN c.model_a = p.quantized THEN c.difference ELSE -c.difference END AS difference,
               CASE WHEN c.model_a = p.quantized THEN c.ci_low ELSE -c.ci_high END AS ci_low,
               CASE WHEN c.model_a = p.quantized THEN c.ci_high ELSE -c.ci_low END AS ci_high,
               c.test, c.p_value, c.p_adjusted, c.n_items
        FROM model_comparisons c JOIN pairs p
          ON (c.model_a = p.quantized AND c.model_b = p.reference) OR (c.model_b = p.quantized AND c.model_a = p.reference);
        """,
    ),
    Migration(
        11,
        "sequential units: why each stopped, the examples it could have used, each chunk's followed values "
        "and the confidence sequences after each chunk",
        """
        ALTER TABLE units ADD COLUMN stop_reason VARCHAR;
        ALTER TABLE units ADD COLUMN examples_available INTEGER;
        ALTER TABLE unit_chunks ADD COLUMN sequence_values VARCHAR;
        CREATE TABLE confidence_sequences (
            run_id VARCHAR NOT NULL,
            unit_id VARCHAR NOT NULL,
            model_id VARCHAR NOT NULL,
            dataset_id VARCHAR NOT NULL,
            chunk INTEGER NOT NULL,
            n_examples INTEGER NOT NULL,
            metric VARCHAR NOT NULL,
            n_values INTEGER NOT NULL,
            estimate DOUBLE,
            lower DOUBLE,
            upper DOUBLE,
            half_width DOUBLE,
            precision DOUBLE,
            alpha DOUBLE
        );
        """,
    ),
    Migration(
        12,
        "comparisons settled sequentially (sago run --until-separated): the paired confidence sequence of "
        "each pair of neighbouring models, written with the chunk that grew it",
        """
        CREATE TABLE comparison_sequences (
            run_id VARCHAR NOT NULL,
            unit_id VARCHAR NOT NULL,
            chunk INTEGER NOT NULL,
            dataset_id VARCHAR NOT NULL,
            model_a VARCHAR NOT NULL,
            model_b VARCHAR NOT NULL,
            metric VARCHAR NOT NULL,
            n_examples INTEGER NOT NULL,
            n_values INTEGER NOT NULL,
            difference DOUBLE,
            lower DOUBLE,
            upper DOUBLE,
            half_width DOUBLE,
            sign INTEGER,
            settled BOOLEAN,
            precision DOUBLE,
            alpha DOUBLE
        );
        """,
    ),
    Migration(
        13,
        "the process writing a run (host, pid), so that a run whose process died is marked interrupted",
        """
        ALTER TABLE runs ADD COLUMN host VARCHAR;
        ALTER TABLE runs ADD COLUMN pid INTEGER;
        """,
    ),
    Migration(
        14,
        "prompts longer than the model, cut from the left as lm-eval does: the tokens cut from each output's",
        """
        ALTER TABLE outputs ADD COLUMN prompt_tokens_cut INTEGER;
        """,
    ),
    Migration(
        15,
        "many processes on one results file: the processes writing runs (heartbeats), and each planned "
        "unit's claim (which process works on it, done, failed)",
        """
        CREATE TABLE workers (
            worker_id VARCHAR NOT NULL,
            run_id VARCHAR NOT NULL,
            host VARCHAR,
            pid INTEGER,
            command VARCHAR,
            started_at TIMESTAMP,
            heartbeat_at TIMESTAMP,
            state VARCHAR
        );
        CREATE TABLE run_units (
            run_id VARCHAR NOT NULL,
            unit_id VARCHAR NOT NULL,
            position INTEGER,
            checkpoint VARCHAR,
            dataset VARCHAR,
            n_examples INTEGER,
            n_chunks INTEGER,
            state VARCHAR,
            worker_id VARCHAR,
            claimed_at TIMESTAMP,
            takeovers INTEGER,
            error VARCHAR
        );
        """,
    ),
    Migration(
        16,
        "lm-evaluation-harness runs through the sago backend (model_args sago_db=FILE): every request "
        "and its result",
        """
        CREATE TABLE lmeval_requests (
            session_id VARCHAR NOT NULL,
            created_at TIMESTAMP,
            model_id VARCHAR,
            checkpoint VARCHAR,
            request_type VARCHAR NOT NULL,
            task VARCHAR,
            doc_id INTEGER,
            request_index INTEGER,
            context VARCHAR,
            continuation VARCHAR,
            loglik DOUBLE,
            is_greedy BOOLEAN,
            generation VARCHAR
        );
        """,
    ),
    Migration(
        17,
        "the text the model read, where it is not the variant's prompt (a chat template, a system prompt)",
        """
        ALTER TABLE outputs ADD COLUMN prompt_read VARCHAR;
        """,
    ),
    Migration(
        18,
        "dataset_names view: one display name per dataset, beside model_names",
        """
        CREATE VIEW dataset_names AS SELECT dataset_id, any_value(name) AS dataset FROM datasets GROUP BY 1;
        """,
    ),
    Migration(
        19,
        "sampled designs: each unit's design and m, and the drawn cells' inclusion probabilities",
        """
        ALTER TABLE units ADD COLUMN design VARCHAR;
        ALTER TABLE units ADD COLUMN families_per_item INTEGER;
        CREATE TABLE design_cells (
            run_id VARCHAR NOT NULL,
            model_id VARCHAR NOT NULL,
            dataset_id VARCHAR NOT NULL,
            example_id VARCHAR NOT NULL,
            family VARCHAR NOT NULL,
            inclusion DOUBLE NOT NULL
        );
        CREATE TABLE design_advice (
            run_id VARCHAR NOT NULL,
            model_id VARCHAR NOT NULL,
            dataset_id VARCHAR NOT NULL,
            axis VARCHAR,
            metric VARCHAR,
            n_items INTEGER,
            families INTEGER,
            families_scored DOUBLE,
            between_item_variance DOUBLE,
            within_item_variance DOUBLE,
            best_m INTEGER,
            cost_at_best DOUBLE
        );
        CREATE VIEW item_cells AS
            SELECT o.run_id, o.model_id, o.dataset_id, o.example_id,
                   count(DISTINCT v.family) FILTER (WHERE NOT v.is_canonical AND v.meaning_preserving) AS n_cells
            FROM outputs o JOIN variants v ON v.dataset_id = o.dataset_id AND v.variant_id = o.variant_id
            WHERE o.replicate = 0
            GROUP BY ALL;
        """,
    ),
    Migration(
        20,
        "layer_scores.value as FLOAT: distances between float32 activations keep every digit they have in "
        "four bytes, and per-layer rows are most of a results file",
        """
        ALTER TABLE layer_scores ALTER value SET DATA TYPE FLOAT;
        """,
    ),
)
