"""Numba drivers: loop over pairs (upper triangle, scipy ``pdist`` order) and call a kernel.

Kernels are passed in as first-class jitted functions (one compiled specialisation per kernel, cached on
disk). Drivers know nothing about metrics.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, parallel=True)
def row_aux(X, fn):  # type: ignore[no-untyped-def]
    """aux[r] = fn(X[r]) for X (n, d) -> (n,) float64."""
    n = X.shape[0]
    out = np.empty(n, dtype=np.float64)
    for r in prange(n):
        out[r] = fn(X[r])
    return out


@njit(cache=True, parallel=True)
def pairs_one(X, aux, kernel):  # type: ignore[no-untyped-def]
    """X (n, d), aux (n,) -> condensed (n*(n-1)/2,) distances, pair (i<j) at i*n - i*(i+1)/2 + j-i-1."""
    n = X.shape[0]
    out = np.empty(n * (n - 1) // 2, dtype=np.float64)
    for i in prange(n - 1):
        base = i * n - i * (i + 1) // 2 - i - 1
        for j in range(i + 1, n):
            out[base + j] = kernel(X[i], X[j], aux[i], aux[j])
    return out


@njit(cache=True, parallel=True)
def pairs_batched(X, aux, kernel):  # type: ignore[no-untyped-def]
    """X (E, V, d), aux (E, V) -> (E, V*(V-1)/2): every example's variants against each other."""
    n_examples, n = X.shape[0], X.shape[1]
    out = np.empty((n_examples, n * (n - 1) // 2), dtype=np.float64)
    for e in prange(n_examples):
        for i in range(n - 1):
            base = i * n - i * (i + 1) // 2 - i - 1
            for j in range(i + 1, n):
                out[e, base + j] = kernel(X[e, i], X[e, j], aux[e, i], aux[e, j])
    return out


@njit(cache=True, parallel=True)
def to_reference(X, aux, ref, kernel):  # type: ignore[no-untyped-def]
    """X (E, V, d), aux (E, V), ref (E,) int -> (E, V): distance of each variant to variant ref[e]."""
    n_examples, n = X.shape[0], X.shape[1]
    out = np.empty((n_examples, n), dtype=np.float64)
    for e in prange(n_examples):
        r = ref[e]
        for j in range(n):
            out[e, j] = 0.0 if j == r else kernel(X[e, j], X[e, r], aux[e, j], aux[e, r])
    return out
