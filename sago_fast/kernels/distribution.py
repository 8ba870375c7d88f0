"""Kernels over probability distributions (rows are non-negative and sum to 1; natural log).

Signature ``kernel(p, q, aux_p, aux_q)`` as in :mod:`vector`; ``aux`` = sum p log p (the negative
entropy) where a kernel needs it. ``0 log 0 = 0`` everywhere; ``KL(p||q) = inf`` when p puts mass where
q has none (the true value, as scipy's ``rel_entr``). Loops run over float32 blocks of ``BLOCK``
elements summed into float64, which keeps SIMD and float64-level accuracy.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from sago_fast.kernels.logf import FLOAT32_TINY, logf
from sago_fast.kernels.vector import SAFE_FASTMATH

BLOCK = 256
LN2 = math.log(2.0)


@njit(inline="always")
def _mid(p, q, i, alone):  # type: ignore[no-untyped-def]
    return p[i] if alone else np.float32(0.5) * (p[i] + q[i])


@njit(cache=True, fastmath=SAFE_FASTMATH)
def _mid_neg_entropy(p, q, alone):  # type: ignore[no-untyped-def]
    """sum_i m_i log m_i with m = p (``alone``) or m = (p + q) / 2 (float32 input; 0 log 0 = 0)."""
    n = p.shape[0]
    full = n - n % BLOCK
    total = 0.0
    for start in range(0, full, BLOCK):
        s = np.float32(0.0)
        for i in range(BLOCK):
            m = _mid(p, q, start + i, alone)
            s += m * logf(max(m, FLOAT32_TINY))
        total += s
    s = np.float32(0.0)
    for i in range(full, n):
        m = _mid(p, q, i, alone)
        s += m * logf(max(m, FLOAT32_TINY))
    return total + s


@njit(cache=True)
def neg_entropy(p):  # type: ignore[no-untyped-def]
    """sum_i p_i log p_i (float32 input; 0 log 0 = 0)."""
    return _mid_neg_entropy(p, p, True)


@njit(cache=True)
def js(p, q, aux_p, aux_q):  # type: ignore[no-untyped-def]
    """JS(p, q) = (sum p log p + sum q log q) / 2 - sum m log m, m = (p + q) / 2; in [0, ln 2]."""
    d = 0.5 * (aux_p + aux_q) - _mid_neg_entropy(p, q, False)
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


@njit(cache=True, fastmath=SAFE_FASTMATH)
def log_row(p, out):  # type: ignore[no-untyped-def]
    """out[i] = log p[i] for p[i] > 0, else 0 (float32; subnormal p in float64, which keeps KL exact
    where q underflowed to a subnormal)."""
    for i in range(p.shape[0]):
        x = p[i]
        if x >= FLOAT32_TINY:
            out[i] = logf(x)
        elif x > 0:
            out[i] = np.float32(math.log(np.float64(x)))
        else:
            out[i] = np.float32(0.0)


@njit(cache=True)
def log_row64(p, out):  # type: ignore[no-untyped-def]
    """out[i] = log p[i] for p[i] > 0, else 0 (float64 input stays exact)."""
    for i in range(p.shape[0]):
        out[i] = math.log(p[i]) if p[i] > 0 else 0.0


@njit(cache=True)
def has_zero(packed):  # type: ignore[no-untyped-def]
    """Aux of the KL kernel on a packed row [p | log p]: 1.0 if some p_i <= 0, else 0.0."""
    for i in range(packed.shape[0] // 2):
        if packed[i] <= 0:
            return 1.0
    return 0.0


@njit(cache=True, fastmath=SAFE_FASTMATH)
def kl_packed(u, v, aux_u, aux_v):  # type: ignore[no-untyped-def]
    """KL(p || q) from packed rows u = [p | log p], v = [q | log q] and aux = has_zero(row):
    sum p (log p - log q); inf if some p_i > 0 has q_i = 0 (checked only when q has zeros)."""
    d = u.shape[0] // 2
    if aux_v > 0.0:
        for i in range(d):
            if u[i] > 0 and v[i] <= 0:
                return np.inf
    full = d - d % BLOCK
    total = 0.0
    for start in range(0, full, BLOCK):
        s = u[0] - u[0]  # zero of the input dtype
        for i in range(BLOCK):
            s += u[start + i] * (u[d + start + i] - v[d + start + i])
        total += s
    s = u[0] - u[0]
    for i in range(full, d):
        s += u[i] * (u[d + i] - v[d + i])
    return max(total + s, 0.0)


@njit(parallel=True, cache=True)
def log_rows32(X, out):  # type: ignore[no-untyped-def]
    """``log_row`` of every float32 row of X (m, d) into out (m, d)."""
    for r in prange(X.shape[0]):
        log_row(X[r], out[r])


@njit(parallel=True, cache=True)
def log_rows64(X, out):  # type: ignore[no-untyped-def]
    """``log_row64`` of every float64 row of X (m, d) into out (m, d)."""
    for r in prange(X.shape[0]):
        log_row64(X[r], out[r])
