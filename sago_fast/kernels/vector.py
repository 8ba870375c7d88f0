"""Kernels over pooled activations: one pair of 1-D vectors in, one float64 distance out.

Every kernel has the signature ``kernel(u, v, aux_u, aux_v)``; ``aux`` holds a per-row quantity the
driver precomputes once (here: the L2 norm for cosine), so the pair loop does no repeated work.
Sums run over blocks of ``BLOCK`` elements in the input's dtype (so float32 loops vectorise) and the
block sums are added in float64: float64 input stays float64 throughout.
"""

from __future__ import annotations

import math

from numba import njit

BLOCK = 256

# Only reassociation/contraction, so that LLVM can vectorise reductions; never nnan/ninf (zeros and
# infinities must keep their IEEE meaning).
SAFE_FASTMATH = {"reassoc", "contract"}


@njit(cache=True, fastmath=SAFE_FASTMATH)
def row_norm(u):  # type: ignore[no-untyped-def]
    """||u||_2."""
    return math.sqrt(dot(u, u))


@njit(cache=True, fastmath=SAFE_FASTMATH)
def dot(u, v):  # type: ignore[no-untyped-def]
    """sum_i u_i v_i (block sums in the input dtype, total in float64).

    Full blocks have a constant trip count (LLVM unrolls and vectorises them); the tail is separate.
    """
    n = u.shape[0]
    full = n - n % BLOCK
    total = 0.0
    for start in range(0, full, BLOCK):
        s = u[0] - u[0]  # zero of the input dtype
        for i in range(BLOCK):
            s += u[start + i] * v[start + i]
        total += s
    s = u[0] - u[0]
    for i in range(full, n):
        s += u[i] * v[i]
    return total + s


@njit(cache=True, fastmath=SAFE_FASTMATH)
def sqeuclidean(u, v, aux_u, aux_v):  # type: ignore[no-untyped-def]
    """sum_i (u_i - v_i)^2"""
    n = u.shape[0]
    full = n - n % BLOCK
    total = 0.0
    for start in range(0, full, BLOCK):
        s = u[0] - u[0]
        for i in range(BLOCK):
            d = u[start + i] - v[start + i]
            s += d * d
        total += s
    s = u[0] - u[0]
    for i in range(full, n):
        d = u[i] - v[i]
        s += d * d
    return total + s


@njit(cache=True, fastmath=SAFE_FASTMATH)
def euclidean(u, v, aux_u, aux_v):  # type: ignore[no-untyped-def]
    """sqrt(sum_i (u_i - v_i)^2)"""
    return math.sqrt(sqeuclidean(u, v, aux_u, aux_v))


@njit(cache=True, fastmath=SAFE_FASTMATH)
def cosine(u, v, aux_u, aux_v):  # type: ignore[no-untyped-def]
    """1 - <u, v> / (||u|| ||v||), with aux = norms.

    Zero vectors: two zero vectors are at distance 0, a zero and a non-zero vector at distance 1
    (scipy returns NaN for these). The result is clipped to [0, 2] against rounding.
    """
    if aux_u == 0.0 and aux_v == 0.0:
        return 0.0
    if aux_u == 0.0 or aux_v == 0.0:
        return 1.0
    d = 1.0 - dot(u, v) / (aux_u * aux_v)
    return min(max(d, 0.0), 2.0)


@njit(cache=True)
def zero_aux(row):  # type: ignore[no-untyped-def]
    """The aux function of metrics that need none."""
    return 0.0
