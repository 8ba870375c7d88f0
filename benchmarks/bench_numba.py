"""Numba compilation per process: the first process after install against every later one.

Compares, in fresh processes over one fresh cache folder (``SAGO_CACHE_DIR``), the seconds the kernels a
`sago run` uses spend before their first result (compilation, or loading from Numba's disk cache): every
metric's pairwise, batched and to-reference drivers on small inputs. The first process compiles and
caches; the later ones should load (target: < 1 s in all). Also times a whole short `sago run` (the demo
zoo's last checkpoint, 5 capitals items, k=1) in a first and a second process.

    python benchmarks/bench_numba.py --rounds 3
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

WORKLOAD = """
import json, time
import numpy as np
t0 = time.perf_counter()
import sago_fast.kernels as K
rng = np.random.default_rng(0)
X = rng.random((3, 5, 8)); P = X / X.sum(-1, keepdims=True)
for name in ("cosine", "euclidean", "sqeuclidean", "js", "kl", "tv", "hellinger"):
    A = X if name in ("cosine", "euclidean", "sqeuclidean") else P
    K.pairwise(A[0], name); K.pairwise_batched(A, name); K.distances_to_reference(A, name)
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""


def kernel_seconds(env: dict[str, str]) -> float:
    out = subprocess.run(
        [sys.executable, "-c", WORKLOAD], capture_output=True, text=True, check=True, env=env
    )
    return float(json.loads(out.stdout)["seconds"])


def run_seconds(env: dict[str, str], work: Path, tag: str) -> float:
    zoo = Path(__file__).resolve().parents[1] / "sago_fast" / "zoo" / "shipped" / "step-01200"
    command = [sys.executable, "-m", "sago_fast.cli.app", "run", "-m", str(zoo), "-d", "capitals"]
    command += ["--limit", "5", "-k", "1", "--no-stats", "--db", str(work / f"{tag}.duckdb")]
    command += ["--cache-dir", str(work / "exports")]
    start = time.perf_counter()
    subprocess.run(command, capture_output=True, check=True, env=env)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    first_k, later_k, first_run, later_run = [], [], [], []
    for r in range(args.rounds):
        work = Path(tempfile.mkdtemp(prefix="sago-bench-numba-"))
        env = {**os.environ, "SAGO_CACHE_DIR": str(work / "cache")}
        env.pop("NUMBA_CACHE_DIR", None)
        first_k.append(kernel_seconds(env))
        later_k.append(kernel_seconds(env))
        run_seconds(env, work, "export")  # the export, outside the timing
        env["SAGO_CACHE_DIR"] = str(work / "cache-run")  # kernels not cached yet for the run timings
        first_run.append(run_seconds(env, work, f"first-{r}"))
        later_run.append(run_seconds(env, work, f"later-{r}"))
    med = statistics.median
    print(
        "Numba kernels and drivers of every metric (pairwise, batched, to-reference), fresh processes, "
        f"medians of {args.rounds}:"
    )
    print(f"  first process (compiles, caches): {med(first_k):6.2f} s")
    print(
        f"  second process (loads the cache): {med(later_k):6.2f} s  (target < 1 s; ratio {med(first_k) / med(later_k):.0f}x)"
    )
    print("whole `sago run` (demo zoo step-01200, capitals, 5 items, k=1, export cached):")
    print(f"  first process:  {med(first_run):6.2f} s")
    print(f"  second process: {med(later_run):6.2f} s  (ratio {med(first_run) / med(later_run):.1f}x)")


if __name__ == "__main__":
    main()
