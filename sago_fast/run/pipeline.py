"""Drive units (model × dataset) and write each unit's rows in one transaction."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sago_fast.datasets.resolve import Dataset, load_dataset
from sago_fast.run.config import RunConfig
from sago_fast.run.evaluate import UnitTables, evaluate_unit, variant_rows
from sago_fast.runinfo import new_run_id, run_row
from sago_fast.store import Store
from sago_fast.types import Variant
from sago_fast.variants import VariantConfig, generate_variants

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UnitResult:
    model_id: str
    checkpoint: str
    dataset_id: str
    n_examples: int
    n_variants: int
    accuracy: float  # canonical-variant accuracy
    seconds: float


@dataclass(frozen=True)
class RunResult:
    run_id: str
    db_path: str
    provider: str
    units: tuple[UnitResult, ...]


def _dataset_rows(store: Store, data: Dataset, variants: Sequence[Variant]) -> None:
    examples = data.examples
    store.insert(
        "datasets",
        {
            "dataset_id": [data.dataset_id],
            "name": [data.name],
            "source": [data.source],
            "task_type": [",".join(data.task_types)],
            "n_examples": [len(examples)],
        },
        key=("dataset_id",),
    )
    store.insert(
        "examples",
        {
            "dataset_id": [data.dataset_id] * len(examples),
            "example_id": [e.example_id for e in examples],
            "task_type": [e.task_type for e in examples],
            "question": [e.question for e in examples],
            "options": [list(e.options) for e in examples],
            "answer_index": [e.answer_index for e in examples],
            "answers": [list(e.answers) for e in examples],
        },
        key=("dataset_id", "example_id"),
    )
    store.insert("variants", variant_rows(data.dataset_id, variants), key=("dataset_id", "variant_id"))


def _model_row(store: Store, model: Any) -> None:
    manifest = model.exported.manifest
    store.insert(
        "models",
        {
            "model_id": [model.model_id],
            "checkpoint": [str(model.checkpoint.path)],
            "model_type": [manifest["model_type"]],
            "n_layers": [manifest["n_layers"]],
            "d_model": [manifest["d_model"]],
            "vocab_size": [manifest["vocab_size"]],
            "export_key": [manifest["key"]],
            "dtype": [manifest["dtype"]],
        },
        key=("model_id", "export_key"),
    )


def _with_keys(columns: dict[str, Any], run_id: str, model_id: str, dataset_id: str) -> dict[str, Any]:
    n = len(next(iter(columns.values()))) if columns else 0
    return {"run_id": [run_id] * n, "model_id": [model_id] * n, "dataset_id": [dataset_id] * n, **columns}


def write_unit(
    store: Store, run_id: str, model: Any, data: Dataset, variants: Sequence[Variant], tables: UnitTables
) -> None:
    """Every row of one unit, committed together (a crash leaves the unit absent, never half there)."""
    with store.transaction():
        _model_row(store, model)
        _dataset_rows(store, data, variants)
        for table in ("outputs", "item_scores", "layer_scores", "dataset_scores"):
            columns = getattr(tables, table)
            if columns:
                store.insert(table, _with_keys(dict(columns), run_id, model.model_id, data.dataset_id))


def run(config: RunConfig, *, command: str = "run", progress: bool = True) -> RunResult:
    """Evaluate every model on every dataset; returns per-unit summaries. Datasets are validated and
    the database opened before any model is exported, so bad input fails fast."""
    import sago_fast

    datasets = [load_dataset(name, limit=config.limit, seed=config.seed) for name in config.datasets]
    variant_config = VariantConfig(families=config.families, k=config.variants_per_family, seed=config.seed)
    variant_config.family_names()  # unknown families fail here
    variants = {d.dataset_id: generate_variants(d.examples, variant_config) for d in datasets}
    run_id = new_run_id()
    units: list[UnitResult] = []
    provider = ""
    from tqdm import tqdm

    with Store(config.db) as store:
        with store.transaction():
            store.insert("runs", run_row(run_id, command, config.as_json(), config.device, "", "running"))
        status = "failed"
        try:
            bar = tqdm(
                total=len(config.models) * len(datasets),
                desc="sago run",
                unit="unit",
                disable=None if progress else True,
            )
            for checkpoint in config.models:
                with sago_fast.load_model(
                    checkpoint, device=config.device, cache_dir=config.cache_dir
                ) as model:
                    provider = model.provider
                    for data in datasets:
                        bar.set_postfix_str(f"{model.checkpoint.path.name} × {data.name}")
                        start = time.perf_counter()
                        tables = evaluate_unit(model, data, variants[data.dataset_id], config.generation)
                        write_unit(store, run_id, model, data, variants[data.dataset_id], tables)
                        units.append(
                            UnitResult(
                                model.model_id,
                                str(model.checkpoint.path),
                                data.dataset_id,
                                len(data.examples),
                                len(variants[data.dataset_id]),
                                tables.accuracy,
                                time.perf_counter() - start,
                            )
                        )
                        log.info(
                            "unit %s × %s done in %.1fs",
                            model.checkpoint.path.name,
                            data.dataset_id,
                            units[-1].seconds,
                        )
                        bar.update(1)
            bar.close()
            status = "done"
        finally:
            store.query(
                "UPDATE runs SET status = $status, provider = $provider WHERE run_id = $run",
                {"status": status, "provider": provider, "run": run_id},
            )
    if config.stats:
        from sago_fast.stats import run_stats

        log.info("computing statistics of run %s", run_id)
        run_stats(config.db, run_id)
    return RunResult(run_id, str(config.db), provider, tuple(units))


def summary_rows(store: Store, run_id: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Per model × dataset: canonical accuracy beside one headline metric per axis (means over examples)."""
    return store.query(SUMMARY_SQL, {"run": run_id})


SUMMARY_SQL = """
WITH m AS (
    SELECT model_id, any_value(checkpoint) AS checkpoint, any_value(n_layers) AS n_layers FROM models GROUP BY model_id
), acc AS (
    SELECT o.model_id, o.dataset_id, avg(o.correct::INT) AS accuracy
    FROM outputs o JOIN variants v ON v.dataset_id = o.dataset_id AND v.variant_id = o.variant_id
    WHERE o.run_id = $run AND v.is_canonical AND o.replicate = 0
    GROUP BY ALL
), items AS (
    SELECT model_id, dataset_id,
           avg(value) FILTER (WHERE axis = 'generation' AND metric = 'flip_rate' AND family IS NULL) AS flip_rate,
           avg(value) FILTER (WHERE axis = 'confidence' AND metric = 'option_js' AND family IS NULL) AS option_js,
           avg(value) FILTER (WHERE axis = 'confidence' AND metric = 'p_gold_sd' AND family IS NULL) AS p_gold_sd,
           avg(value) FILTER (WHERE axis = 'mirroring' AND metric = 'position_mirroring') AS position_mirroring,
           avg(value) FILTER (WHERE axis = 'mirroring' AND metric = 'cue_following') AS cue_following,
           avg(value) FILTER (WHERE axis = 'mirroring' AND metric = 'prompt_echo' AND family IS NULL) AS prompt_echo
    FROM item_scores WHERE run_id = $run
    GROUP BY ALL
), act AS (
    SELECT l.model_id, l.dataset_id, avg(l.value) AS dispersion
    FROM layer_scores l JOIN m USING (model_id)
    WHERE l.run_id = $run AND l.metric = 'dispersion' AND l.family IS NULL AND l.pooling = 'mean'
      AND l.layer = m.n_layers
    GROUP BY ALL
)
SELECT regexp_extract(m.checkpoint, '[^/]+$') AS model,
       acc.dataset_id AS dataset,
       round(accuracy, 3) AS accuracy,
       round(flip_rate, 3) AS generation_flip_rate,
       round(dispersion, 3) AS activation_dispersion,
       round(option_js, 4) AS confidence_option_js,
       round(p_gold_sd, 3) AS confidence_p_gold_sd,
       round(position_mirroring, 3) AS mirroring_position,
       round(cue_following, 3) AS mirroring_cue,
       round(prompt_echo, 3) AS mirroring_echo
FROM acc JOIN items USING (model_id, dataset_id) LEFT JOIN act USING (model_id, dataset_id) JOIN m USING (model_id)
ORDER BY dataset, model
"""
