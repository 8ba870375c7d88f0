"""Numba drivers: loop over pairs (upper triangle, scipy ``pdist`` order) and call a kernel.

This file is a template, specialised per metric by :mod:`sago_fast.kernels.specialise`: the drivers call
the module globals ``kernel`` (pair kernel), ``aux_fn`` (per-row aux) and ``tiled_fn`` (whole-example
tiled form), and the specialiser writes a copy of this file per metric with the three import lines marked
``# SPECIALISE`` pointing at that metric's functions. Every driver is then an ordinary jitted function
calling its kernels by name, which Numba caches on disk (``cache=True``); kernels passed as arguments
(first-class functions) compile again in every process. The copies live in a folder keyed by the source
of every kernel module, so a changed kernel can never meet a stale cached driver.

A driver computes each example's aux values right before that example's pairs, while its rows are in
cache, so no extra pass over memory is made. Drivers know nothing about metrics.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from sago_fast.kernels.tiled import cosine_condensed as tiled_fn  # SPECIALISE: tiled
from sago_fast.kernels.vector import cosine as kernel  # SPECIALISE: kernel
from sago_fast.kernels.vector import row_norm as aux_fn  # SPECIALISE: aux


@njit(cache=True)
def _pairs_into(X, out):  # type: ignore[no-untyped-def]
    """All pairs of one example's rows X (n, d) into out (n*(n-1)/2,)."""
    n = X.shape[0]
    aux = np.empty(n, dtype=np.float64)
    for r in range(n):
        aux[r] = aux_fn(X[r])
    for i in range(n - 1):
        base = i * n - i * (i + 1) // 2 - i - 1
        for j in range(i + 1, n):
            out[base + j] = kernel(X[i], X[j], aux[i], aux[j])


@njit(cache=True)
def pairs_one_serial(X):  # type: ignore[no-untyped-def]
    """X (n, d) -> condensed (n*(n-1)/2,) on one thread (small inputs: waking threads costs more)."""
    n = X.shape[0]
    out = np.empty(n * (n - 1) // 2, dtype=np.float64)
    _pairs_into(X, out)
    return out


@njit(parallel=True, cache=True)
def pairs_one(X):  # type: ignore[no-untyped-def]
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


@njit(parallel=True, cache=True)
def batched(X):  # type: ignore[no-untyped-def]
    """X (E, V, d) -> (E, V*(V-1)/2): every example's variants against each other, examples in parallel,
    each with ``example_fn`` (the metric's whole-example tiled form, or the pair loop where it has none)."""
    n_examples, n = X.shape[0], X.shape[1]
    out = np.empty((n_examples, n * (n - 1) // 2), dtype=np.float64)
    for e in prange(n_examples):
        out[e] = example_fn(X[e])
    return out


@njit(parallel=True, cache=True)
def to_reference(X, ref):  # type: ignore[no-untyped-def]
    """X (E, V, d), ref (E,) int -> (E, V): distance of each variant to variant ref[e] (0 for itself)."""
    n_examples, n = X.shape[0], X.shape[1]
    out = np.empty((n_examples, n), dtype=np.float64)
    for e in prange(n_examples):
        r = ref[e]
        aux_r = aux_fn(X[e, r])
        for j in range(n):
            out[e, j] = 0.0 if j == r else kernel(X[e, j], X[e, r], aux_fn(X[e, j]), aux_r)
    return out


# Numba reads globals when it compiles (first call), so this may follow the drivers that call it.
example_fn = pairs_one_serial if tiled_fn is None else tiled_fn
