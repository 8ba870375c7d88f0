"""Register-tiled all-pairs loops over one example's rows (few variants, long rows).

Row i is combined with four rows j..j+3 at once, so every load of X[i] feeds four accumulators (the
pair-at-a-time loop is bound by loads). Three combinations: dot products (cosine via the Gram matrix:
d_ij = 1 - G_ij / sqrt(G_ii G_jj), with the loop kernel's zero-vector convention), squared differences
(squared Euclidean, no Gram cancellation) and absolute differences (total variation). Block sums in the
input dtype, totals in float64, as in :mod:`vector`. ``*_condensed`` return scipy ``pdist`` order.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from sago_fast.kernels.vector import BLOCK, SAFE_FASTMATH

DOT, SQUARED_DIFFERENCE, ABSOLUTE_DIFFERENCE = 0, 1, 2


@njit(inline="always")
def _term(op, x, y):  # type: ignore[no-untyped-def]
    """One element's contribution: x * y, (x - y)^2 or |x - y| (``op`` is the same in every call of a
    loop, so the compiler takes the branch out of it)."""
    if op == DOT:
        return x * y
    if op == SQUARED_DIFFERENCE:
        d = x - y
        return d * d
    return abs(x - y)


@njit(cache=True, fastmath=SAFE_FASTMATH)
def _upper(X, op, first):  # type: ignore[no-untyped-def]
    """X (n, d) -> U (n, n) float64 with U[i, j] = sum_k term(X_ik, X_jk) for j >= i + first (the rest 0)."""
    n, d = X.shape
    U = np.zeros((n, n), dtype=np.float64)
    full = d - d % BLOCK
    for i in range(n - first):
        xi = X[i]
        j = i + first
        while j + 4 <= n:
            a, b, c, e = X[j], X[j + 1], X[j + 2], X[j + 3]
            t0 = 0.0
            t1 = 0.0
            t2 = 0.0
            t3 = 0.0
            for start in range(0, full, BLOCK):
                s0 = xi[0] - xi[0]  # zero of the input dtype
                s1 = s0
                s2 = s0
                s3 = s0
                for k in range(BLOCK):
                    x = xi[start + k]
                    s0 += _term(op, x, a[start + k])
                    s1 += _term(op, x, b[start + k])
                    s2 += _term(op, x, c[start + k])
                    s3 += _term(op, x, e[start + k])
                t0 += s0
                t1 += s1
                t2 += s2
                t3 += s3
            for k in range(full, d):
                x = xi[k]
                t0 += _term(op, x, a[k])
                t1 += _term(op, x, b[k])
                t2 += _term(op, x, c[k])
                t3 += _term(op, x, e[k])
            U[i, j] = t0
            U[i, j + 1] = t1
            U[i, j + 2] = t2
            U[i, j + 3] = t3
            j += 4
        while j < n:
            t = 0.0
            for k in range(d):
                t += _term(op, xi[k], X[j, k])
            U[i, j] = t
            j += 1
    return U


@njit(cache=True)
def gram_upper(X):  # type: ignore[no-untyped-def]
    """X (n, d) -> G (n, n) float64 with G[i, j] = <X_i, X_j> for j >= i (lower triangle left 0)."""
    return _upper(X, DOT, 0)


@njit(cache=True)
def sqdist_upper(X):  # type: ignore[no-untyped-def]
    """X (n, d) -> S (n, n) float64 with S[i, j] = sum_k (X_ik - X_jk)^2 for j > i."""
    return _upper(X, SQUARED_DIFFERENCE, 1)


@njit(cache=True)
def absdist_upper(X):  # type: ignore[no-untyped-def]
    """X (n, d) -> A (n, n) float64 with A[i, j] = sum_k |X_ik - X_jk| for j > i."""
    return _upper(X, ABSOLUTE_DIFFERENCE, 1)


@njit(cache=True)
def cosine_condensed(X):  # type: ignore[no-untyped-def]
    """X (n, d) -> condensed cosine distances (pdist order) from the tiled Gram matrix."""
    G = gram_upper(X)
    n = X.shape[0]
    out = np.empty(n * (n - 1) // 2, dtype=np.float64)
    k = 0
    for i in range(n - 1):
        ni = math.sqrt(max(G[i, i], 0.0))
        for j in range(i + 1, n):
            nj = math.sqrt(max(G[j, j], 0.0))
            if ni == 0.0 and nj == 0.0:
                out[k] = 0.0
            elif ni == 0.0 or nj == 0.0:
                out[k] = 1.0
            else:
                out[k] = min(max(1.0 - G[i, j] / (ni * nj), 0.0), 2.0)
            k += 1
    return out


@njit(cache=True)
def _upper_condensed(M, scale, root):  # type: ignore[no-untyped-def]
    n = M.shape[0]
    out = np.empty(n * (n - 1) // 2, dtype=np.float64)
    k = 0
    for i in range(n - 1):
        for j in range(i + 1, n):
            v = M[i, j] * scale
            out[k] = math.sqrt(v) if root else v
            k += 1
    return out


@njit(cache=True)
def sqeuclidean_condensed(X):  # type: ignore[no-untyped-def]
    return _upper_condensed(sqdist_upper(X), 1.0, False)


@njit(cache=True)
def euclidean_condensed(X):  # type: ignore[no-untyped-def]
    return _upper_condensed(sqdist_upper(X), 1.0, True)


@njit(cache=True)
def hellinger_condensed(R):  # type: ignore[no-untyped-def]
    """Hellinger from square-rooted rows: ||r_i - r_j|| / sqrt(2), clipped to 1."""
    out = _upper_condensed(sqdist_upper(R), 0.5, True)
    return np.minimum(out, 1.0)


@njit(cache=True)
def tv_condensed(X):  # type: ignore[no-untyped-def]
    return _upper_condensed(absdist_upper(X), 0.5, False)
