"""sago's ONNX Runtime probe vs HF transformers eager doing the same job, side by side.

Job: for every prompt, pooled hidden states of every layer (last token + mask mean) and the log-softmax
next-token distribution at the last prompt token. Both engines get the same left-padded batches of the same
token ids for the engine-only comparison ("sago ORT, same batches"); "sago probe" is what users call,
``model.probe``, which also buckets prompts by length before batching. HF runs in ``torch.inference_mode`` with its default attention and ``logits_to_keep=1`` (its
fastest fair setting). Outputs are checked to agree before anything is timed; the engines then alternate
repeat by repeat and medians are reported.

    python benchmarks/bench_probe.py                      # ~56M Llama-style model, batch 1, 8, 32
    python benchmarks/bench_probe.py --json out.json --repeats 7
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM

import sago_fast
from sago_fast.checkpoints.tiny import TinySize, build_tiny_checkpoint
from sago_fast.exporters.unified import pooled_forward
from sago_fast.runtime.batching import BatchPolicy, left_pad

WORDS = (
    "the quick brown fox jumps over lazy dog what is answer question options larger smaller capital".split()
)


def make_prompts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(12, 48)))) + "?" for _ in range(n)]


def hf_probe(model, batches, pad_id):
    outs = []
    with torch.inference_mode():
        for batch in batches:
            ids, mask = left_pad(batch, pad_id)
            out = pooled_forward(model, torch.from_numpy(ids), torch.from_numpy(mask))
            outs.append({k: v.numpy() for k, v in out.items()})
    return outs


def ort_probe(model, batches):
    return [model.probe_ids(batch) for batch in batches]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "sago-bench-probe")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    ckpt = args.workdir / "llama-56m"
    if not (ckpt / "config.json").is_file():
        build_tiny_checkpoint("llama", ckpt, TinySize.bench_50m())
    sago_model = sago_fast.load_model(ckpt, device="cpu", cache_dir=args.workdir / "exports")
    hf_model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    n_params = sum(p.numel() for p in hf_model.parameters())
    token_ids = sago_model.tokenize(make_prompts(args.prompts))
    real_tokens = sum(len(t) for t in token_ids)
    pad_id = sago_model.pad_id
    print(
        f"model: llama {n_params / 1e6:.1f}M params (hidden {sago_model.d_model}, {sago_model.n_layers} layers, "
        f"vocab {sago_model.exported.manifest['vocab_size']}); {args.prompts} prompts, {real_tokens} tokens; "
        f"torch threads {torch.get_num_threads()}; ORT {sago_model.provider}"
    )
    print("job: pooled hidden states (last token + mask mean, every layer) + next-token log-probs")

    rows = []
    for bs in args.batch_sizes:
        # same batches for both engines: prompts in order, `bs` at a time
        batches = [token_ids[i : i + bs] for i in range(0, len(token_ids), bs)]
        sago_model.engine.batch_policy = BatchPolicy(token_budget=1 << 30, max_batch=bs)
        ours, ref = ort_probe(sago_model, batches[:2]), hf_probe(hf_model, batches[:2], pad_id)
        for o, r in zip(ours, ref, strict=True):
            for name in ("hidden_last", "hidden_mean", "next_logprobs"):
                err = float(np.abs(getattr(o, name) - r[name]).max())
                assert err < 1e-3, f"engines disagree on {name} at batch {bs}: {err}"
        bucketed = sago_model.probe_ids(token_ids)  # sago's own batching must give the same numbers
        np.testing.assert_allclose(
            bucketed.next_logprobs[: len(batches[0])], ours[0].next_logprobs, atol=1e-4
        )
        runs = {
            "sago_probe": lambda: sago_model.probe_ids(token_ids),
            "sago_same_batches": lambda b=batches: ort_probe(sago_model, b),
            "hf_eager": lambda b=batches: hf_probe(hf_model, b, pad_id),
        }
        times: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(args.repeats):
            for name, run in runs.items():  # interleaved: each repeat runs every engine once
                t0 = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        row = {"batch_size": bs, **{f"{k}_tokens_per_s": real_tokens / v for k, v in med.items()}}
        row["ratio_probe_vs_hf"] = med["hf_eager"] / med["sago_probe"]
        row["ratio_same_batches_vs_hf"] = med["hf_eager"] / med["sago_same_batches"]
        rows.append(row)
        print(
            f"batch {bs:>3}: sago probe {row['sago_probe_tokens_per_s']:7.0f} tok/s | sago ORT, same batches "
            f"{row['sago_same_batches_tokens_per_s']:7.0f} | HF eager {row['hf_eager_tokens_per_s']:7.0f} | "
            f"ratio probe/HF {row['ratio_probe_vs_hf']:.2f}x, same-batches/HF {row['ratio_same_batches_vs_hf']:.2f}x "
            f"(median of {args.repeats})"
        )
    if args.json:
        args.json.write_text(json.dumps({"params": n_params, "tokens": real_tokens, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
