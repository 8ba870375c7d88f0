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


@njit(cache=True, fastmath=SAFE_FASTMATH)
def gram_upper(X):  # type: ignore[no-untyped-def]
    """X (n, d) -> G (n, n) float64 with G[i, j] = <X_i, X_j> for j >= i (lower triangle left 0)."""
    n, d = X.shape
    G = np.zeros((n, n), dtype=np.float64)
    full = d - d % BLOCK
    for i in range(n):
        xi = X[i]
        j = i
        while j + 4 <= n:
            a, b, c, e = X[j], X[j + 1], X[j + 2], X[j + 3]
            t0 = 0.0
            t1 = 0.0
            t2 = 0.0
            t3 = 0.0
            for start in range(0, full, BLOCK):
                s0 = xi[0] - xi[0]
                s1 = s0
                s2 = s0
                s3 = s0
                for k in range(BLOCK):
                    x = xi[start + k]
                    s0 += x * a[start + k]
                    s1 += x * b[start + k]
                    s2 += x * c[start + k]
                    s3 += x * e[start + k]
                t0 += s0
                t1 += s1
                t2 += s2
                t3 += s3
            for k in range(full, d):
                x = xi[k]
                t0 += x * a[k]
                t1 += x * b[k]
                t2 += x * c[k]
                t3 += x * e[k]
            G[i, j] = t0
            G[i, j + 1] = t1
            G[i, j + 2] = t2
            G[i, j + 3] = t3
            j += 4
        while j < n:
            t = 0.0
            for k in range(d):
                t += xi[k] * X[j, k]
            G[i, j] = t
            j += 1
    return G


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


@njit(cache=True, fastmath=SAFE_FASTMATH)
def sqdist_upper(X):  # type: ignore[no-untyped-def]
    """X (n, d) -> S (n, n) float64 with S[i, j] = sum_k (X_ik - X_jk)^2 for j > i."""
    n, d = X.shape
    S = np.zeros((n, n), dtype=np.float64)
    full = d - d % BLOCK
    for i in range(n - 1):
        xi = X[i]
        j = i + 1
        while j + 4 <= n:
            a, b, c, e = X[j], X[j + 1], X[j + 2], X[j + 3]
            t0 = 0.0
            t1 = 0.0
            t2 = 0.0
            t3 = 0.0
            for start in range(0, full, BLOCK):
                s0 = xi[0] - xi[0]
                s1 = s0
                s2 = s0
                s3 = s0
                for k in range(BLOCK):
                    x = xi[start + k]
                    d0 = x - a[start + k]
                    d1 = x - b[start + k]
                    d2 = x - c[start + k]
                    d3 = x - e[start + k]
                    s0 += d0 * d0
                    s1 += d1 * d1
                    s2 += d2 * d2
                    s3 += d3 * d3
                t0 += s0
                t1 += s1
                t2 += s2
                t3 += s3
            for k in range(full, d):
                x = xi[k]
                t0 += (x - a[k]) ** 2
                t1 += (x - b[k]) ** 2
                t2 += (x - c[k]) ** 2
                t3 += (x - e[k]) ** 2
            S[i, j] = t0
            S[i, j + 1] = t1
            S[i, j + 2] = t2
            S[i, j + 3] = t3
            j += 4
        while j < n:
            t = 0.0
            for k in range(d):
                t += (xi[k] - X[j, k]) ** 2
            S[i, j] = t
            j += 1
    return S


@njit(cache=True, fastmath=SAFE_FASTMATH)
def absdist_upper(X):  # type: ignore[no-untyped-def]
    """X (n, d) -> A (n, n) float64 with A[i, j] = sum_k |X_ik - X_jk| for j > i."""
    n, d = X.shape
    A = np.zeros((n, n), dtype=np.float64)
    full = d - d % BLOCK
    for i in range(n - 1):
        xi = X[i]
        j = i + 1
        while j + 4 <= n:
            a, b, c, e = X[j], X[j + 1], X[j + 2], X[j + 3]
            t0 = 0.0
            t1 = 0.0
            t2 = 0.0
            t3 = 0.0
            for start in range(0, full, BLOCK):
                s0 = xi[0] - xi[0]
                s1 = s0
                s2 = s0
                s3 = s0
                for k in range(BLOCK):
                    x = xi[start + k]
                    s0 += abs(x - a[start + k])
                    s1 += abs(x - b[start + k])
                    s2 += abs(x - c[start + k])
                    s3 += abs(x - e[start + k])
                t0 += s0
                t1 += s1
                t2 += s2
                t3 += s3
            for k in range(full, d):
                x = xi[k]
                t0 += abs(x - a[k])
                t1 += abs(x - b[k])
                t2 += abs(x - c[k])
                t3 += abs(x - e[k])
            A[i, j] = t0
            A[i, j + 1] = t1
            A[i, j + 2] = t2
            A[i, j + 3] = t3
            j += 4
        while j < n:
            t = 0.0
            for k in range(d):
                t += abs(xi[k] - X[j, k])
            A[i, j] = t
            j += 1
    return A


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
