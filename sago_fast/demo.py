"""The embedded default job behind ``sago demo`` / ``make demo``.

1. Train (or reuse) the zoo: tiny Llama-style models on the built-in suites, checkpoints along training.
2. Render canonical + perturbed variants of a sample of a built-in suite.
3. For every zoo checkpoint: export (cached), answer every variant by option log-likelihood through ONNX
   Runtime, and store runs/models/datasets/examples/variants/outputs in DuckDB in one transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sago_fast.datasets.resolve import Dataset, load_dataset
from sago_fast.runinfo import new_run_id, run_row
from sago_fast.store import Store
from sago_fast.types import Variant
from sago_fast.variants import VariantConfig, generate_variants
from sago_fast.zoo import ZooConfig, build_zoo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoConfig:
    """out_dir: zoo, exports and database. dataset/n_examples/k: what is rendered. device: cpu|cuda|auto."""

    out_dir: Path = Path("sago_out/demo")
    device: str = "cpu"
    dataset: str = "capitals"
    n_examples: int = 40
    k: int = 1
    zoo: ZooConfig = field(default_factory=ZooConfig)


@dataclass(frozen=True)
class DemoResult:
    db_path: Path
    run_id: str
    model_ids: tuple[str, ...]
    checkpoints: tuple[str, ...]
    n_outputs: int
    provider: str


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
    store.insert(
        "variants",
        {
            "dataset_id": [data.dataset_id] * len(variants),
            "example_id": [v.example_id for v in variants],
            "variant_id": [v.variant_id for v in variants],
            "family": [v.family for v in variants],
            "params_json": [v.params for v in variants],
            "is_canonical": [v.is_canonical for v in variants],
            "meaning_preserving": [v.meaning_preserving for v in variants],
            "prompt": [v.prompt for v in variants],
            "option_order": [list(v.option_order) for v in variants],
        },
        key=("dataset_id", "variant_id"),
    )


def run_demo(config: DemoConfig = DemoConfig()) -> DemoResult:
    import sago_fast
    from sago_fast.runtime.options import answer_variants

    zoo = build_zoo(config.out_dir / "zoo", config.zoo)
    data = load_dataset(config.dataset, limit=config.n_examples)
    variants = generate_variants(data.examples, VariantConfig(k=config.k))
    run_id = new_run_id()
    db_path = config.out_dir / "sago.duckdb"
    model_ids, provider, n_outputs = [], "", 0
    with Store(db_path) as store, store.transaction():
        _dataset_rows(store, data, variants)
        for checkpoint in zoo.checkpoints:
            with sago_fast.load_model(
                checkpoint, device=config.device, cache_dir=config.out_dir / "exports"
            ) as model:
                answers = answer_variants(model, data.examples, variants)
                lengths = [len(ids) for ids in model.tokenize([v.prompt for v in variants])]
                manifest = model.exported.manifest
                provider = model.provider
                store.insert(
                    "models",
                    {
                        "model_id": [model.model_id],
                        "checkpoint": [str(checkpoint)],
                        "model_type": [manifest["model_type"]],
                        "n_layers": [manifest["n_layers"]],
                        "d_model": [manifest["d_model"]],
                        "vocab_size": [manifest["vocab_size"]],
                        "export_key": [manifest["key"]],
                        "dtype": [manifest["dtype"]],
                    },
                    key=("model_id", "export_key"),
                )
                by_id = {e.example_id: e for e in data.examples}
                n = len(variants)
                store.insert(
                    "outputs",
                    {
                        "run_id": [run_id] * n,
                        "model_id": [model.model_id] * n,
                        "dataset_id": [data.dataset_id] * n,
                        "example_id": [v.example_id for v in variants],
                        "variant_id": [v.variant_id for v in variants],
                        "replicate": np.zeros(n, dtype=np.int32),
                        "n_prompt_tokens": np.asarray(lengths, dtype=np.int32),
                        "answer": [
                            by_id[v.example_id].options[a.answer_index]
                            for v, a in zip(variants, answers, strict=True)
                        ],
                        "answer_index": [a.answer_index for a in answers],
                        "correct": [a.correct for a in answers],
                        "option_logprobs": [a.option_logprobs.tolist() for a in answers],
                        "p_gold": [a.p_gold for a in answers],
                        "entropy": [a.entropy for a in answers],
                        "margin": [a.margin for a in answers],
                    },
                )
                model_ids.append(model.model_id)
                n_outputs += n
        store.insert(
            "runs",
            run_row(
                run_id,
                "demo",
                {"dataset": config.dataset, "n_examples": config.n_examples, "k": config.k},
                config.device,
                provider,
                "done",
            ),
        )
    return DemoResult(
        db_path, run_id, tuple(model_ids), tuple(str(c) for c in zoo.checkpoints), n_outputs, provider
    )


SUMMARY_SQL = """
WITH o AS (
    SELECT o.*, m.checkpoint, v.family, v.is_canonical, v.meaning_preserving
    FROM outputs o
    JOIN models m USING (model_id)
    JOIN variants v ON v.dataset_id = o.dataset_id AND v.variant_id = o.variant_id
    WHERE o.run_id = $run
), canon AS (
    SELECT model_id, example_id, answer_index AS canon_answer FROM o WHERE is_canonical
)
SELECT regexp_extract(checkpoint, '[^/]+$') AS checkpoint,
       round(avg(CASE WHEN is_canonical THEN correct::INT END), 3) AS canonical_acc,
       round(avg(CASE WHEN NOT is_canonical AND meaning_preserving THEN correct::INT END), 3) AS variant_acc,
       round(avg(CASE WHEN NOT is_canonical AND meaning_preserving THEN (answer_index <> canon_answer)::INT END), 3) AS flip_rate,
       round(avg(CASE WHEN family = 'wrong_hint' THEN (answer_index <> canon_answer)::INT END), 3) AS hint_flip_rate,
       count(*) AS n_outputs
FROM o JOIN canon USING (model_id, example_id)
GROUP BY checkpoint ORDER BY checkpoint
"""
