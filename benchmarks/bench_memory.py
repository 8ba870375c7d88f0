"""Peak memory of `sago run` against the dataset size: streamed chunks vs the whole unit at once.

Two contenders, on the same checkpoint and data, each `sago run` in its own process (peak RSS from the
kernel's rusage of that process):
  streamed     the default: the unit is answered and committed in chunks (--chunk-memory-mb default)
  whole-unit   one chunk holding the whole unit (--chunk-memory-mb 1e9): what every run did before units
               streamed (every variant's next-token log-probs and hidden states held until the end)

Model: a tiny Llama (hidden 64, 2 layers) with a Llama-3-sized vocabulary (128,256), random weights; data:
MMLU-like 4-option items (question ~60 words), every family, k = 1 (12 renderings an item). Peak RSS is
expected flat in the number of items when streamed.

    python benchmarks/bench_memory.py                       # 40 and 160 items, both contenders
    python benchmarks/bench_memory.py --items 40 160 640 --only streamed
    python benchmarks/bench_memory.py --synthetic 14000     # one streamed run of 14,000 items, small vocab
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sago_fast.checkpoints.tiny import TinySize, build_tiny_checkpoint

CONTENDERS = {"streamed": [], "whole-unit": ["--chunk-memory-mb", "1e9"]}
WORDS = (
    "which of the following best describes a process in which energy matter system value cell law court "
    "market theory function state change rate number force water light heat reaction model data result "
    "under given conditions most likely explains why when an increase decrease occurs between two groups"
).split()


def mmlu_like(path: Path, n: int, seed: int = 0, question_words: int = 60) -> Path:
    """``n`` MMLU-format rows (a question of ``question_words`` words, A-D, answer letter), seeded."""
    rng = np.random.default_rng(seed)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        for i in range(n):
            question = " ".join(rng.choice(WORDS, size=question_words)).capitalize() + f" (item {i})?"
            options = [" ".join(rng.choice(WORDS, size=5)) for _ in range(4)]
            writer.writerow([question, *options, "ABCD"[i % 4]])
    return path


def peak_rss_of(command: list[str]) -> tuple[float, float]:
    """(peak RSS in GB, seconds) of one process running ``command``."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stderr.read() if proc.stderr else ''}")
    return usage.ru_maxrss / 1e6, seconds  # ru_maxrss: kB on Linux


def sago_run(checkpoint: Path, data: Path, db: Path, cache: Path, extra: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sago_fast.cli.app",
        "run",
        "-m",
        str(checkpoint),
        "-d",
        f"mmlu:{data}",
        "-k",
        "1",
        "--db",
        str(db),
        "--cache-dir",
        str(cache),
        "--no-stats",
        *extra,
    ]


def export_once(checkpoint: Path, work: Path, cache: Path) -> None:
    """Run 4 items first, so the export (paid once per checkpoint) is cached outside the measurement."""
    warm = sago_run(checkpoint, mmlu_like(work / "warm.csv", 4), work / "warm.duckdb", cache, [])
    subprocess.run(warm, check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, nargs="+", default=[40, 160])
    parser.add_argument("--only", choices=sorted(CONTENDERS), default=None)
    parser.add_argument("--synthetic", type=int, default=None, help="one streamed run of this many items")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sago-bench-memory-"))
    cache = work / "cache"
    results = []
    if args.synthetic:
        checkpoint = build_tiny_checkpoint(
            "llama", work / "tiny", TinySize(hidden=64, layers=2, max_positions=1024)
        )
        data = mmlu_like(work / f"mmlu-{args.synthetic}.csv", args.synthetic)
        print(
            f"synthetic: {args.synthetic} MMLU-like items, every family, k=1, tiny llama (hidden 64, 2 layers, "
            "vocab 512), streamed",
            flush=True,
        )
        export_once(checkpoint, work, cache)
        rss, seconds = peak_rss_of(sago_run(checkpoint, data, work / "synthetic.duckdb", cache, []))
        import duckdb

        con = duckdb.connect(str(work / "synthetic.duckdb"), read_only=True)
        variants, chunks = con.execute("SELECT n_variants, n_chunks FROM units").fetchone()
        estimator = con.execute("SELECT estimator, sample_size FROM unit_estimators LIMIT 1").fetchone()
        con.close()
        print(
            f"{args.synthetic} items, {variants} variants, {chunks} chunks: peak RSS {rss:.2f} GB, {seconds:.0f} s; "
            f"kNN/CKA estimator {estimator[0]} ({estimator[1]} examples)"
        )
        results.append(
            {
                "items": args.synthetic,
                "variants": variants,
                "chunks": chunks,
                "peak_rss_gb": rss,
                "seconds": seconds,
                "estimator": estimator,
            }
        )
    else:
        size = TinySize(hidden=64, layers=2, max_positions=1024, vocab_size=128256)
        checkpoint = build_tiny_checkpoint("llama", work / "tiny-128k", size)
        print(
            "peak RSS of `sago run`, tiny llama (hidden 64, 2 layers, vocab 128,256), MMLU-like items, every "
            "family, k=1; each run its own process",
            flush=True,
        )
        export_once(checkpoint, work, cache)
        contenders = [args.only] if args.only else list(CONTENDERS)
        for n in args.items:
            data = mmlu_like(work / f"mmlu-{n}.csv", n)
            row = {"items": n}
            for name in contenders:
                rss, seconds = peak_rss_of(
                    sago_run(checkpoint, data, work / f"{name}-{n}.duckdb", cache, CONTENDERS[name])
                )
                row[name] = {"peak_rss_gb": rss, "seconds": seconds}
            results.append(row)
            cells = "  ".join(
                f"{name}: {row[name]['peak_rss_gb']:.2f} GB ({row[name]['seconds']:.0f} s)"
                for name in contenders
            )
            print(f"{n:>6} items  {cells}", flush=True)
        first, last = results[0], results[-1]
        for name in contenders:
            ratio = last[name]["peak_rss_gb"] / first[name]["peak_rss_gb"]
            print(f"{name}: peak RSS at {last['items']} items / at {first['items']} items = {ratio:.2f}x")
        if len(contenders) == 2:
            print(
                f"whole-unit / streamed at {last['items']} items = "
                f"{last['whole-unit']['peak_rss_gb'] / last['streamed']['peak_rss_gb']:.2f}x"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
