"""The embedded default job behind ``sago demo`` / ``make demo``.

Today: build a tiny Llama-style checkpoint locally, export it (cached), probe a handful of built-in
multiple-choice prompts, and store runs/models/datasets/examples/variants/outputs in DuckDB.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import entropy

from sago_fast.checkpoints.tiny import build_tiny_checkpoint
from sago_fast.runinfo import new_run_id, run_row
from sago_fast.store import Store

log = logging.getLogger(__name__)

DEMO_DATASET = "demo-arithmetic"
DEMO_EXAMPLES = (
    ("add-1", "What is 2 + 3?", ("4", "5", "6", "7"), 1),
    ("add-2", "What is 10 + 7?", ("17", "18", "16", "71"), 0),
    ("cmp-1", "Which is larger, 41 or 14?", ("14", "41"), 1),
    ("cmp-2", "Which is smaller, 9 or 19?", ("19", "9"), 1),
    ("rev-1", "Spell 'cat' backwards.", ("act", "tac", "cta"), 1),
)


@dataclass(frozen=True)
class DemoConfig:
    """out_dir: where the checkpoint, export cache and database go. device: cpu|cuda|auto."""

    out_dir: Path = Path("sago_out/demo")
    device: str = "cpu"
    arch: str = "llama"


@dataclass(frozen=True)
class DemoResult:
    db_path: Path
    run_id: str
    model_id: str
    n_outputs: int
    provider: str


def render_prompt(question: str, options: tuple[str, ...]) -> str:
    letters = "ABCDEFGH"
    lines = [f"Question: {question}"] + [f"{letters[i]}. {o}" for i, o in enumerate(options)]
    return "\n".join(lines) + "\nAnswer:"


def run_demo(config: DemoConfig = DemoConfig()) -> DemoResult:
    import sago_fast

    checkpoint = config.out_dir / "checkpoints" / f"tiny-{config.arch}"
    if not (checkpoint / "config.json").is_file():
        log.info("building tiny %s checkpoint at %s", config.arch, checkpoint)
        build_tiny_checkpoint(config.arch, checkpoint)
    model = sago_fast.load_model(checkpoint, device=config.device, cache_dir=config.out_dir / "exports")
    prompts = [render_prompt(q, opts) for _, q, opts, _ in DEMO_EXAMPLES]
    result = model.probe(prompts)
    top = result.next_logprobs.argmax(-1)  # (n,)
    probs = np.exp(result.next_logprobs.astype(np.float64))  # (n, vocab)

    run_id = new_run_id()
    n = len(DEMO_EXAMPLES)
    ids = [e[0] for e in DEMO_EXAMPLES]
    variant_ids = [hashlib.sha256(p.encode()).hexdigest()[:16] for p in prompts]
    db_path = config.out_dir / "sago.duckdb"
    with Store(db_path) as store, store.transaction():
        store.insert(
            "runs", run_row(run_id, "demo", {"arch": config.arch}, model.device, model.provider, "done")
        )
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
        store.insert(
            "datasets",
            {
                "dataset_id": [DEMO_DATASET],
                "name": [DEMO_DATASET],
                "source": ["built-in"],
                "task_type": ["multiple_choice"],
                "n_examples": [n],
            },
            key=("dataset_id",),
        )
        store.insert(
            "examples",
            {
                "dataset_id": [DEMO_DATASET] * n,
                "example_id": ids,
                "task_type": ["multiple_choice"] * n,
                "question": [e[1] for e in DEMO_EXAMPLES],
                "options": [list(e[2]) for e in DEMO_EXAMPLES],
                "answer_index": [e[3] for e in DEMO_EXAMPLES],
            },
            key=("dataset_id", "example_id"),
        )
        store.insert(
            "variants",
            {
                "dataset_id": [DEMO_DATASET] * n,
                "example_id": ids,
                "variant_id": variant_ids,
                "family": ["canonical"] * n,
                "params_json": ["{}"] * n,
                "is_canonical": [True] * n,
                "meaning_preserving": [True] * n,
                "prompt": prompts,
                "option_order": [list(range(len(e[2]))) for e in DEMO_EXAMPLES],
            },
            key=("dataset_id", "variant_id"),
        )
        store.insert(
            "outputs",
            {
                "run_id": [run_id] * n,
                "model_id": [model.model_id] * n,
                "dataset_id": [DEMO_DATASET] * n,
                "example_id": ids,
                "variant_id": variant_ids,
                "replicate": np.zeros(n, dtype=np.int32),
                "n_prompt_tokens": result.n_tokens.astype(np.int32),
                "top_token": [model.tokenizer.decode([int(t)]) for t in top],
                "top_logprob": result.next_logprobs[np.arange(n), top].astype(np.float64),
                "entropy": entropy(probs, axis=-1),
            },
        )
    model.close()
    return DemoResult(
        db_path=db_path, run_id=run_id, model_id=model.model_id, n_outputs=n, provider=model.provider
    )
