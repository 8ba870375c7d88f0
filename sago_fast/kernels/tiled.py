"""Register-tiled Gram matrix of one example's rows, for cosine distances between few variants.

Each row i is multiplied with four rows j..j+3 at once, so every load of X[i] feeds four dot products
(the pair-at-a-time loop is bound by loads). Block sums in the input dtype, totals in float64, as in
:mod:`vector`. Cosine from the Gram matrix: d_ij = 1 - G_ij / sqrt(G_ii G_jj), with the loop kernel's
zero-vector convention.
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
