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
)
