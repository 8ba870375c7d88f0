"""Pairwise distance kernels: sago (Numba / BLAS) vs scipy vs plain numpy, side by side.

For each case the competitors are first checked to agree, then run interleaved; medians are printed with
the ratio scipy/sago and numpy/sago, and sago's effective bandwidth (bytes its kernel reads: two rows per
pair) against this machine's memory read bandwidth, measured here first.

    python benchmarks/bench_kernels.py               # full grid (~3 minutes on 2 cores)
    python benchmarks/bench_kernels.py --quick       # a smaller grid
    python benchmarks/bench_kernels.py --json out.json

scipy's JS/KL over large vocabularies takes seconds per case, so it is timed on the first
``--scipy-pairs`` pairs and scaled to all pairs (marked "~" in the table).
"""

from __future__ import annotations

import os

# Numba's OpenMP pool and OpenBLAS both spin after work; on 2 cores they slow each other 10x when
# interleaved. The benchmark owns its process: make waiting threads sleep (set before any pool starts).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np
from scipy.spatial.distance import jensenshannon, pdist
from scipy.special import rel_entr, xlogy

import sago_fast.kernels as K


@numba.njit(parallel=True, fastmath={"reassoc", "contract"})
def _parallel_sum(a: np.ndarray) -> float:
    s = np.float32(0.0)
    for i in numba.prange(a.shape[0]):
        s += a[i]
    return s


def measure_read_bandwidth(n_bytes: int = 1 << 29, repeats: int = 5) -> float:
    """GB/s of a streaming float32 sum over a buffer far larger than the caches, on every core."""
    a = np.ones(n_bytes // 4, dtype=np.float32)
    _parallel_sum(a[:1024])
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        _parallel_sum(a)
        best = max(best, n_bytes / (time.perf_counter() - t0) / 1e9)
    return best


def median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(competitors: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in competitors}
    for _ in range(repeats):
        for name, fn in competitors.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def numpy_cosine(X: np.ndarray) -> np.ndarray:
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    i, j = np.triu_indices(len(X), 1)
    return 1.0 - (Xn @ Xn.T)[i, j]


def numpy_js(P: np.ndarray) -> np.ndarray:
    out = []
    neg = xlogy(P, P).sum(axis=1)
    for i in range(len(P) - 1):
        M = 0.5 * (P[i] + P[i + 1 :])
        out.append(0.5 * (neg[i] + neg[i + 1 :]) - xlogy(M, M).sum(axis=1))
    return np.concatenate(out)


def numpy_kl(P: np.ndarray) -> np.ndarray:
    out = []
    for i in range(len(P) - 1):
        out.append(rel_entr(P[i], P[i + 1 :]).sum(axis=1))
    return np.concatenate(out)


def scipy_pairs(
    P: np.ndarray, fn: Callable[[np.ndarray, np.ndarray], float], limit: int
) -> tuple[np.ndarray, int]:
    n = len(P)
    pairs = [(i, j) for i in range(n - 1) for j in range(i + 1, n)][:limit]
    return np.array([fn(P[i], P[j]) for i, j in pairs]), len(pairs)


def run_case(
    kind: str, metric: str, V: int, d: int, repeats: int, scipy_limit: int, bandwidth: float
) -> dict:
    rng = np.random.default_rng(0)
    n_pairs = V * (V - 1) // 2
    if kind == "vector":
        X = rng.standard_normal((V, d)).astype(np.float32)
        ours = lambda: K.pairwise(X, metric, check=False)  # noqa: E731
        comp = {"sago": ours, "scipy": lambda: pdist(X, metric), "numpy": lambda: numpy_cosine(X)}
        np.testing.assert_allclose(ours(), pdist(X, metric), atol=1e-5)
        np.testing.assert_allclose(numpy_cosine(X), pdist(X, metric), atol=1e-4)
        scale, scipy_n = 1.0, n_pairs
        itemsize = 4
    else:
        P = rng.dirichlet(np.full(d, 0.1), size=V).astype(np.float32)
        P /= P.sum(axis=1, keepdims=True)
        P64 = P.astype(np.float64)
        ref_fn = (
            (lambda u, v: jensenshannon(u, v) ** 2) if metric == "js" else (lambda u, v: rel_entr(u, v).sum())
        )
        np_fn = numpy_js if metric == "js" else numpy_kl
        ours = lambda: K.pairwise(P, metric, check=False)  # noqa: E731
        want, scipy_n = scipy_pairs(P64, ref_fn, scipy_limit)
        np.testing.assert_allclose(ours()[:scipy_n], want, atol=2e-6, rtol=1e-5)
        np.testing.assert_allclose(np_fn(P64)[:scipy_n], want, atol=1e-9, rtol=1e-7)
        comp = {
            "sago": ours,
            "scipy": lambda: scipy_pairs(P64, ref_fn, scipy_limit),
            "numpy": lambda: np_fn(P64),
        }
        scale = n_pairs / scipy_n
        itemsize = 4
    ours()  # JIT warm-up and cache load
    med = interleaved(comp, repeats)
    med["scipy"] *= scale
    bytes_read = n_pairs * 2 * d * itemsize
    gbps = bytes_read / med["sago"] / 1e9
    return {
        "kind": kind,
        "metric": metric,
        "variants": V,
        "dim": d,
        "sago_ms": med["sago"] * 1e3,
        "scipy_ms": med["scipy"] * 1e3,
        "scipy_extrapolated": scale != 1.0,
        "numpy_ms": med["numpy"] * 1e3,
        "scipy_over_sago": med["scipy"] / med["sago"],
        "numpy_over_sago": med["numpy"] / med["sago"],
        "sago_gbps": gbps,
        "share_of_bandwidth": gbps / bandwidth,
    }


def streaming_case(metric: str, E: int, V: int, d: int, repeats: int, bandwidth: float) -> dict:
    """Many examples at once (data far larger than cache): the batched driver streams through memory."""
    rng = np.random.default_rng(1)
    if metric in ("js", "tv", "hellinger", "kl"):
        X = rng.dirichlet(np.full(d, 0.1), size=E * V).astype(np.float32).reshape(E, V, d)
        X /= X.sum(axis=-1, keepdims=True)
    else:
        X = rng.standard_normal((E, V, d)).astype(np.float32)
    ref = (
        np.stack([pdist(X[e].astype(np.float64), "sqeuclidean") for e in range(2)])
        if metric == "sqeuclidean"
        else None
    )
    got = K.pairwise_batched(X, metric, check=False)
    if ref is not None:
        np.testing.assert_allclose(got[:2], ref, rtol=1e-5)
    t = median_time(lambda: K.pairwise_batched(X, metric, check=False), repeats)
    touched = X.nbytes  # every row comes from memory once; the pairs reuse it from cache
    return {
        "metric": metric,
        "examples": E,
        "variants": V,
        "dim": d,
        "ms": t * 1e3,
        "gbps_from_memory": touched / t / 1e9,
        "share_of_bandwidth": touched / t / 1e9 / bandwidth,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scipy-pairs", type=int, default=64)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    bandwidth = measure_read_bandwidth()
    print(
        f"machine memory read bandwidth (streaming float32 sum on all cores, best of 5): {bandwidth:.1f} GB/s"
    )
    print(f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}; numba threads {numba.get_num_threads()}")
    variants = [8, 32] if args.quick else [8, 32, 128]
    dims = [512, 4096]
    vocabs = [32_000] if args.quick else [32_000, 128_000]
    rows = []
    for V in variants:
        for d in dims:
            rows.append(run_case("vector", "cosine", V, d, args.repeats, args.scipy_pairs, bandwidth))
        for d in vocabs:
            rows.append(run_case("distribution", "js", V, d, args.repeats, args.scipy_pairs, bandwidth))
            rows.append(run_case("distribution", "kl", V, d, args.repeats, args.scipy_pairs, bandwidth))
    header = f"{'metric':<7} {'V':>4} {'dim':>7} {'sago ms':>9} {'scipy ms':>10} {'numpy ms':>9} {'scipy/sago':>11} {'numpy/sago':>11} {'sago GB/s':>10}"
    print("\npairwise distances within one example (same input for all; medians)")
    print(header)
    for r in rows:
        approx = "~" if r["scipy_extrapolated"] else " "
        print(
            f"{r['metric']:<7} {r['variants']:>4} {r['dim']:>7} {r['sago_ms']:>9.3f} {approx}{r['scipy_ms']:>9.2f} "
            f"{r['numpy_ms']:>9.3f} {r['scipy_over_sago']:>10.1f}x {r['numpy_over_sago']:>10.1f}x {r['sago_gbps']:>10.1f}"
        )
    print("\nstreaming: many examples per call (pairwise_batched), bytes from memory once")
    stream = [
        streaming_case("js", 64, 8, 32_000, args.repeats, bandwidth),
        streaming_case("tv", 64, 8, 32_000, args.repeats, bandwidth),
        streaming_case("sqeuclidean", 2048, 8, 4096, args.repeats, bandwidth),
        streaming_case("cosine", 2048, 8, 4096, args.repeats, bandwidth),
    ]
    for s in stream:
        print(
            f"{s['metric']:<12} E={s['examples']:<5} V={s['variants']:<3} dim={s['dim']:<6} {s['ms']:8.2f} ms  "
            f"{s['gbps_from_memory']:6.1f} GB/s = {100 * s['share_of_bandwidth']:5.1f}% of measured bandwidth"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"bandwidth_gbps": bandwidth, "pairwise": rows, "streaming": stream}, indent=2)
        )


if __name__ == "__main__":
    main()
