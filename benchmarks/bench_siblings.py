"""Ten sibling checkpoints (one training run's `step-*`): export + load time, cache bytes, resident memory.

Compares, on checkpoints of one shape with different weights:
  single export   : export + load of the first checkpoint (through torch and Optimum)
  siblings        : export + load of all N checkpoints into one cache (the first exported, the others
                    re-weighted: the shared graph pointing at each checkpoint's own safetensors file)
and reports the ratio siblings / single (target <= 2x), the cache bytes per checkpoint against the weight
bytes at the export dtype, and the memory a process adds by loading one checkpoint and probing (private
pages, and file pages of memory-mapped weights), for the exported checkpoint and for a re-weighted one.

    python benchmarks/bench_siblings.py                   # SmolLM2-135M shape, 10 checkpoints (~4 min)
    python benchmarks/bench_siblings.py --shape small -n 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sago_fast
from sago_fast.checkpoints.tiny import TinySize, build_tiny_checkpoint

SHAPES = {
    "smollm2": TinySize.smollm2_135m,
    "small": lambda: TinySize(
        hidden=256, layers=4, heads=4, kv_heads=4, intermediate=688, max_positions=1024, vocab_size=8000
    ),
}

RSS_PROBE = """
import json, sys, onnxruntime, optimum.exporters.onnx, torch, transformers, sago_fast  # libraries first
def memory():  # MiB: private (anonymous) and file-backed resident pages
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return {k: int(fields[k].split()[0]) / 1024 for k in ("RssAnon", "RssFile")}
before = memory()
model = sago_fast.load_model(sys.argv[1], cache_dir=sys.argv[2])
model.probe(["The capital of France is"] * 8)
after = memory()
print(json.dumps({"reweighted": model.exported.reweighted, **{k: after[k] - before[k] for k in after}}))
"""


def folder_bytes(path: Path, outside: set[tuple[int, int]] | None = None) -> int:
    """Bytes the files under ``path`` take, each inode once, not counting hard links to ``outside``
    files (the checkpoints' own safetensors, which a re-weighted entry links instead of copying)."""
    seen = set(outside or ())
    total = 0
    for f in path.rglob("*"):
        st = f.stat()
        if f.is_file() and (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm2")
    parser.add_argument("-n", type=int, default=10, help="sibling checkpoints")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "sago-bench-siblings")
    args = parser.parse_args()
    size = SHAPES[args.shape]()
    steps = []
    for i in range(args.n):
        path = args.workdir / args.shape / f"step-{i:02d}"
        if not (path / "config.json").is_file():
            build_tiny_checkpoint("llama", path, size, seed=i)
        steps.append(path)
    os.sync()  # the checkpoints just written reach the disk before timing, not during it
    weight_bytes = sum(f.stat().st_size for f in steps[0].glob("*.safetensors"))  # fp32 safetensors
    print(
        f"{args.n} llama checkpoints of the {args.shape} shape ({weight_bytes / 2**20:.0f} MiB of fp32 weights each)"
    )

    single_cache = args.workdir / f"cache-single-{time.time_ns()}"
    os.environ["SAGO_CACHE_DIR"] = str(single_cache)  # no content hash remembered from an earlier run
    t0 = time.perf_counter()
    sago_fast.load_model(steps[0], cache_dir=single_cache).close()
    single = time.perf_counter() - t0

    cache = args.workdir / f"cache-siblings-{time.time_ns()}"
    os.environ["SAGO_CACHE_DIR"] = str(cache)  # every checkpoint hashed afresh
    each = []
    for step in steps:
        t0 = time.perf_counter()
        sago_fast.load_model(step, cache_dir=cache).close()
        each.append(time.perf_counter() - t0)
    siblings = sum(each)

    entries = [p for p in cache.iterdir() if p.is_dir() and (p / "manifest.json").is_file()]
    checkpoint_files = {
        (f.stat().st_dev, f.stat().st_ino) for step in steps for f in step.glob("*.safetensors")
    }
    cache_bytes = folder_bytes(cache, checkpoint_files)
    memory = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", RSS_PROBE, str(step), str(cache)],
                capture_output=True,
                text=True,
                check=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        for step in (steps[0], steps[-1])
    ]
    print(f"single export + load     : {single:7.1f} s")
    print(
        f"{args.n} siblings export + load: {siblings:7.1f} s  (ratio {siblings / single:.2f}x a single export; target <= 2x)"
    )
    print(
        f"  of which the first (exported): {each[0]:.1f} s; each re-weighted one: "
        + " ".join(f"{t:.2f}" for t in each[1:])
        + f" s (median {statistics.median(each[1:]) if len(each) > 1 else 0:.2f} s)"
    )
    print(
        f"cache: {cache_bytes / 2**20:.0f} MiB for {len(entries)} checkpoints = {cache_bytes / len(entries) / 2**20:.0f} MiB "
        f"per checkpoint; {cache_bytes / weight_bytes:.2f}x one checkpoint's weights in all "
        f"(single-entry cache {folder_bytes(single_cache) / weight_bytes:.2f}x its weights; "
        "the re-weighted entries hard-link their checkpoint's safetensors file, not counted)"
    )
    for m in memory:
        kind = "re-weighted sibling" if m["reweighted"] else "exported checkpoint"
        print(
            f"memory added by loading the {kind} and probing 8 prompts: {m['RssAnon']:.0f} MiB private "
            f"({m['RssAnon'] * 2**20 / weight_bytes:.2f}x its weight bytes) + {m['RssFile']:.0f} MiB of "
            "file pages (memory-mapped weights, shared and evictable)"
        )


if __name__ == "__main__":
    main()
