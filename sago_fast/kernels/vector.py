"""Kernels over pooled activations: one pair of 1-D vectors in, one float64 distance out.

Every kernel has the signature ``kernel(u, v, aux_u, aux_v)``; ``aux`` holds a per-row quantity the
driver precomputes once (here: the L2 norm for cosine), so the pair loop does no repeated work.
Accumulation is in float64 whatever the input dtype.
"""

from __future__ import annotations

import math

from numba import njit

# Only reassociation/contraction, so that LLVM can vectorise reductions; never nnan/ninf (zeros and
# infinities must keep their IEEE meaning).
SAFE_FASTMATH = {"reassoc", "contract"}


@njit(cache=True, fastmath=SAFE_FASTMATH)
def row_norm(u):  # type: ignore[no-untyped-def]
    """||u||_2."""
    s = 0.0
    for i in range(u.shape[0]):
        s += float(u[i]) * float(u[i])
    return math.sqrt(s)


@njit(cache=True, fastmath=SAFE_FASTMATH)
def sqeuclidean(u, v, aux_u, aux_v):  # type: ignore[no-untyped-def]
    """sum_i (u_i - v_i)^2"""
    s = 0.0
    for i in range(u.shape[0]):
        d = float(u[i]) - float(v[i])
        s += d * d
    return s


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
    s = 0.0
    for i in range(u.shape[0]):
        s += float(u[i]) * float(v[i])
    d = 1.0 - s / (aux_u * aux_v)
    return min(max(d, 0.0), 2.0)
