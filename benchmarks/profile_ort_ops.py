"""Where ONNX Runtime's time goes inside one prefill pass of SmolLM2-135M-Instruct (fp32, CPU): its own
profiler, per operator type and, for the matrix products, per layer part, with each linear layer's
GFLOP/s.

The session is opened as sago opens it on CPU (``SessionOptions`` defaults: "extended" fusions, no constant
folding, prepacked weights); the batch is ``--batch`` prompts of ``--tokens`` random token ids, no padding.
The first ``--warmup`` calls are not counted; the report is the median call of ``--repeats``.

    python benchmarks/profile_ort_ops.py --batch 37 --tokens 110
    python benchmarks/profile_ort_ops.py --batch 8 --tokens 40 --past 110 --score   # an option block pass
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import tempfile
from pathlib import Path

import numpy as np
from real_model import offline_workdir, smollm2_gguf

LINEAR = re.compile(r"/(mlp/(gate|up|down)_proj|self_attn/[qkvo]_proj)/")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=37)
    parser.add_argument("--tokens", type=int, default=110)
    parser.add_argument(
        "--past", type=int, default=0, help="positions already in the KV cache (a pass continuing it)"
    )
    parser.add_argument(
        "--score",
        action="store_true",
        help="score every new token but the first (target_ids), as an option block pass does",
    )
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "sago-bench-lmeval")
    args = parser.parse_args()
    offline_workdir(args.workdir)
    import onnxruntime as ort

    import sago_fast
    from sago_fast.runtime.session import SessionOptions

    with sago_fast.load_model(smollm2_gguf()) as model:  # the export, cached in the workdir
        path, weights = model.exported.model_path, model.exported.manifest
    options = SessionOptions()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.intra_op_num_threads = options.intra_op_threads
    so.enable_mem_reuse = False  # sago's CPU default (SessionOptions.memory_reuse "auto")
    so.log_severity_level = 3
    so.enable_profiling = True
    so.profile_file_prefix = str(args.workdir / "ort-profile")
    session = ort.InferenceSession(
        str(path), so, providers=["CPUExecutionProvider"], disabled_optimizers=["ConstantFolding"]
    )
    feeds = prefill_feeds(session, args.batch, args.tokens, int(weights["vocab_size"]), args.past)
    if args.score:
        feeds["target_ids"] = np.ascontiguousarray(feeds["input_ids"][:, 1:])
    names = [o.name for o in session.get_outputs() if not o.name.startswith("present.")]
    for _ in range(args.warmup + args.repeats):
        session.run(names, feeds)
    events = json.loads(Path(session.end_profiling()).read_text())
    calls = [e for e in events if e.get("cat") == "Session" and e["name"] == "model_run"][args.warmup :]
    median = sorted(calls, key=lambda e: e["dur"])[len(calls) // 2]
    nodes = [
        e
        for e in events
        if e.get("cat") == "Node"
        and e["name"].endswith("_kernel_time")
        and median["ts"] <= e["ts"] <= median["ts"] + median["dur"]
    ]
    report(nodes, median["dur"] / 1e6, args.batch * args.tokens)
    print(f"  (median of {len(calls)} calls: {statistics.median(c['dur'] for c in calls) / 1e6:.2f} s)")


def prefill_feeds(session, batch: int, tokens: int, vocab: int, past: int = 0) -> dict[str, np.ndarray]:
    """A pass of ``batch`` unpadded rows of ``tokens`` random ids on a random KV cache of ``past``
    positions (0: a prefill), nothing to score."""
    rng = np.random.default_rng(0)
    ids = rng.integers(100, vocab, (batch, tokens)).astype(np.int64)
    everything = np.ones((batch, past + tokens), dtype=np.int64)  # past and new columns
    feeds: dict[str, np.ndarray] = {}
    for node in session.get_inputs():
        if node.name == "input_ids":
            feeds[node.name] = ids
        elif node.name in ("attention_mask", "segment_ids"):
            feeds[node.name] = everything if node.name == "attention_mask" else np.zeros_like(everything)
        elif node.name == "target_ids":
            feeds[node.name] = ids[:, :0]
        elif node.name.startswith("past_key_values."):
            heads, size = node.shape[1], node.shape[3]
            feeds[node.name] = rng.standard_normal((batch, heads, past, size)).astype(np.float32)
    return feeds


def _shape(described: dict[str, list[int]]) -> list[int]:
    """The shape of one of a profiled node's tensors (``{"float": [37, 110, 576]}``)."""
    return next(iter(described.values()))


def report(nodes: list[dict], seconds: float, tokens: int) -> None:
    total = sum(e["dur"] for e in nodes)
    by_op, count = collections.Counter(), collections.Counter()
    linear_us, linear_flop = 0.0, 0.0
    for e in nodes:
        by_op[e["args"]["op_name"]] += e["dur"]
        count[e["args"]["op_name"]] += 1
        if LINEAR.search(e["name"]):  # (..., K) @ (K, N) -> (..., N): 2 K N flops a row
            linear_us += e["dur"]
            x, y = _shape(e["args"]["input_type_shape"][0]), _shape(e["args"]["output_type_shape"][0])
            linear_flop += 2.0 * float(np.prod(x[:-1])) * x[-1] * y[-1]
    print(
        f"one pass of {tokens} new tokens: {seconds:.2f} s ({tokens / seconds:.0f} tokens/s), "
        f"{len(nodes)} nodes, {total / 1e6:.2f} s in them"
    )
    for op, us in by_op.most_common(14):
        print(f"  {op:30s} {us / 1e3:8.1f} ms  {us / total:6.1%}  x{count[op]}")
    share = linear_us / total
    rate = f", {linear_flop / linear_us / 1e3:.0f} GFLOP/s"
    print(f"  the linear layers' matrix products: {linear_us / 1e3:.1f} ms, {share:.1%} of node time{rate}")
    print(f"  everything else (attention, norms, rotary embeddings, masks): {1 - share:.1%}")


if __name__ == "__main__":
    main()
