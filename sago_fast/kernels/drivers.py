"""Numba drivers: loop over pairs (upper triangle, scipy ``pdist`` order) and call a kernel.

Kernels and per-row ``aux`` functions are passed in as first-class jitted functions (one compiled
specialisation per kernel). Drivers are not cached on disk: Numba checks a cached entry only against its
own file, so an entry that embeds a kernel from another file can outlive a change to that kernel
(seen as "underlying object has vanished" errors); the kernels themselves are cached. A driver computes each example's aux values right before
that example's pairs, while its rows are in cache, so no extra pass over memory is made. Drivers know
nothing about metrics.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit
def zero_aux(row):  # type: ignore[no-untyped-def]
    """The aux function of metrics that need none."""
    return 0.0


@njit
def _pairs_into(X, aux_fn, kernel, out):  # type: ignore[no-untyped-def]
    """All pairs of one example's rows X (n, d) into out (n*(n-1)/2,)."""
    n = X.shape[0]
    aux = np.empty(n, dtype=np.float64)
    for r in range(n):
        aux[r] = aux_fn(X[r])
    for i in range(n - 1):
        base = i * n - i * (i + 1) // 2 - i - 1
        for j in range(i + 1, n):
            out[base + j] = kernel(X[i], X[j], aux[i], aux[j])


@njit
def pairs_one_serial(X, aux_fn, kernel):  # type: ignore[no-untyped-def]
    """X (n, d) -> condensed (n*(n-1)/2,) on one thread (small inputs: waking threads costs more)."""
    n = X.shape[0]
    out = np.empty(n * (n - 1) // 2, dtype=np.float64)
    _pairs_into(X, aux_fn, kernel, out)
    return out


@njit(parallel=True)
def pairs_one(X, aux_fn, kernel):  # type: ignore[no-untyped-def]
    """X (n, d) -> condensed (n*(n-1)/2,), rows of the triangle spread over threads."""
    n = X.shape[0]
    aux = np.empty(n, dtype=np.float64)
    for r in prange(n):
        aux[r] = aux_fn(X[r])
    out = np.empty(n * (n - 1) // 2, dtype=np.float64)
    for i in prange(n - 1):
        base = i * n - i * (i + 1) // 2 - i - 1
        for j in range(i + 1, n):
            out[base + j] = kernel(X[i], X[j], aux[i], aux[j])
    return out


@njit(parallel=True)
def pairs_batched(X, aux_fn, kernel):  # type: ignore[no-untyped-def]
    """X (E, V, d) -> (E, V*(V-1)/2): every example's variants against each other, examples in parallel."""
    n_examples, n = X.shape[0], X.shape[1]
    out = np.empty((n_examples, n * (n - 1) // 2), dtype=np.float64)
    for e in prange(n_examples):
        _pairs_into(X[e], aux_fn, kernel, out[e])
    return out


@njit(parallel=True)
def batched_tiled(X, tiled):  # type: ignore[no-untyped-def]
    """X (E, V, d) -> (E, V*(V-1)/2) with a whole-example tiled function ``tiled(X_e) -> condensed``."""
    n_examples, n = X.shape[0], X.shape[1]
    out = np.empty((n_examples, n * (n - 1) // 2), dtype=np.float64)
    for e in prange(n_examples):
        out[e] = tiled(X[e])
    return out


@njit(parallel=True)
def to_reference(X, ref, aux_fn, kernel):  # type: ignore[no-untyped-def]
    """X (E, V, d), ref (E,) int -> (E, V): distance of each variant to variant ref[e] (0 for itself)."""
    n_examples, n = X.shape[0], X.shape[1]
    out = np.empty((n_examples, n), dtype=np.float64)
    for e in prange(n_examples):
        r = ref[e]
        aux_r = aux_fn(X[e, r])
        for j in range(n):
            out[e, j] = 0.0 if j == r else kernel(X[e, j], X[e, r], aux_fn(X[e, j]), aux_r)
    return out


@njit(parallel=True)
def rows_apply(X, out, fn):  # type: ignore[no-untyped-def]
    """fn(X[r], out[r]) for every row (in-place row transforms such as log rows)."""
    for r in prange(X.shape[0]):
        fn(X[r], out[r])
