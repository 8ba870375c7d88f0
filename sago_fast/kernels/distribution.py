"""Kernels over probability distributions (rows are non-negative and sum to 1; natural log).

Signature ``kernel(p, q, aux_p, aux_q)`` as in :mod:`vector`; ``aux`` = sum p log p (the negative
entropy) where a kernel needs it. ``0 log 0 = 0`` everywhere; ``KL(p||q) = inf`` when p puts mass where
q has none (the true value, as scipy's ``rel_entr``). Loops run over float32 blocks of ``BLOCK``
elements summed into float64, which keeps SIMD and float64-level accuracy.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from sago_fast.kernels.logf import FLOAT32_TINY, logf
from sago_fast.kernels.vector import SAFE_FASTMATH

BLOCK = 256
LN2 = math.log(2.0)


@njit(cache=True, fastmath=SAFE_FASTMATH)
def neg_entropy(p):  # type: ignore[no-untyped-def]
    """sum_i p_i log p_i (float32 input; 0 log 0 = 0)."""
    total = 0.0
    n = p.shape[0]
    for start in range(0, n, BLOCK):
        s = np.float32(0.0)
        for i in range(start, min(start + BLOCK, n)):
            x = p[i]
            s += x * logf(max(x, FLOAT32_TINY))
        total += s
    return total


@njit(cache=True, fastmath=SAFE_FASTMATH)
def js(p, q, aux_p, aux_q):  # type: ignore[no-untyped-def]
    """JS(p, q) = (sum p log p + sum q log q) / 2 - sum m log m, m = (p + q) / 2; in [0, ln 2]."""
    total = 0.0
    n = p.shape[0]
    for start in range(0, n, BLOCK):
        s = np.float32(0.0)
        for i in range(start, min(start + BLOCK, n)):
            m = np.float32(0.5) * (p[i] + q[i])
            s += m * logf(max(m, FLOAT32_TINY))
        total += s
    d = 0.5 * (aux_p + aux_q) - total
    return min(max(d, 0.0), LN2)


@njit(cache=True)
def kl(p, q, aux_p, aux_q):  # type: ignore[no-untyped-def]
    """KL(p || q) = sum p log(p / q); inf if some p_i > 0 has q_i = 0. (The matmul form is the fast path.)"""
    s = 0.0
    for i in range(p.shape[0]):
        if p[i] > 0.0:
            if q[i] <= 0.0:
                return np.inf
            s += float(p[i]) * (math.log(float(p[i])) - math.log(float(q[i])))
    return max(s, 0.0)


@njit(cache=True, fastmath=SAFE_FASTMATH)
def tv(p, q, aux_p, aux_q):  # type: ignore[no-untyped-def]
    """Total variation: sum |p_i - q_i| / 2, in [0, 1]."""
    s = 0.0
    for i in range(p.shape[0]):
        s += abs(float(p[i]) - float(q[i]))
    return 0.5 * s


@njit(cache=True, fastmath=SAFE_FASTMATH)
def hellinger_sqrt_rows(r, s, aux_r, aux_s):  # type: ignore[no-untyped-def]
    """Hellinger distance from square-rooted rows r = sqrt(p), s = sqrt(q): ||r - s||_2 / sqrt(2), in [0, 1]."""
    acc = 0.0
    for i in range(r.shape[0]):
        d = float(r[i]) - float(s[i])
        acc += d * d
    return min(math.sqrt(0.5 * acc), 1.0)
