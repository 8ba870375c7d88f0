"""BLAS formulations: where a matrix product beats pair loops (many variants, KL, CKA).

Shapes: X is (..., n, d); results are full (..., n, n) matrices that the API condenses.
"""

from __future__ import annotations

import numpy as np
from scipy.special import xlogy


def cosine_matrix(X: np.ndarray) -> np.ndarray:
    """(..., n, d) -> (..., n, n) cosine distances via the Gram matrix (BLAS in the input's precision,
    float32 or float64; the rest in float64).

    Same zero-vector convention as the loop kernel: 0 between two zero rows, 1 between a zero and a
    non-zero row.
    """
    Xf = X if X.dtype in (np.float32, np.float64) else X.astype(np.float64)
    gram = (Xf @ np.swapaxes(Xf, -1, -2)).astype(np.float64)  # (..., n, n)
    norms = np.sqrt(np.clip(np.diagonal(gram, axis1=-2, axis2=-1), 0.0, None))  # (..., n)
    denom = norms[..., :, None] * norms[..., None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        dist = 1.0 - gram / denom
    zero = norms == 0.0
    one_zero = zero[..., :, None] ^ zero[..., None, :]
    both_zero = zero[..., :, None] & zero[..., None, :]
    dist = np.where(one_zero, 1.0, np.where(both_zero, 0.0, dist))
    return np.clip(dist, 0.0, 2.0)


def cosine_between(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """(n, d) and (m, d) -> (n, m) cosine distances between every row of X and every row of C, with the
    zero-vector convention of :func:`cosine_matrix` (0 between zero rows, 1 between a zero and a non-zero)."""
    gram = (X @ C.T).astype(np.float64)
    nx = np.linalg.norm(X.astype(np.float64), axis=1)
    nc = np.linalg.norm(C.astype(np.float64), axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        dist = 1.0 - gram / (nx[:, None] * nc[None, :])
    zx, zc = (nx == 0.0)[:, None], (nc == 0.0)[None, :]
    dist = np.where(zx ^ zc, 1.0, np.where(zx & zc, 0.0, dist))
    return np.clip(dist, 0.0, 2.0)


def kl_matrix(P: np.ndarray) -> np.ndarray:
    """(..., n, V) distributions -> (..., n, n) with [i, j] = KL(P_i || P_j), as two matrix products.

    KL_ij = sum_k p_ik log p_ik - sum_k p_ik log p_jk; inf where P_i has mass outside P_j's support.
    """
    P64 = P.astype(np.float64, copy=False)
    neg_entropy = xlogy(P64, P64).sum(axis=-1)  # (..., n)
    with np.errstate(divide="ignore"):
        log_p = np.where(P64 > 0, np.log(np.where(P64 > 0, P64, 1.0)), 0.0)  # (..., n, V), 0 where p = 0
    cross = P64 @ np.swapaxes(log_p, -1, -2)  # (..., n, n)
    outside = (P64 > 0).astype(np.float64) @ np.swapaxes((P64 <= 0).astype(np.float64), -1, -2)
    kl = np.clip(neg_entropy[..., :, None] - cross, 0.0, None)
    return np.where(outside > 0, np.inf, kl)


def linear_cka(A: np.ndarray, B: np.ndarray) -> float:
    """Linear CKA between representations A (n, d1) and B (n, d2) of the same n items.

    CKA = ||B_c^T A_c||_F^2 / (||A_c^T A_c||_F ||B_c^T B_c||_F) with column-centred A_c, B_c; computed in
    the n x n Gram form <K, L>_F / (||K||_F ||L||_F) when n is smaller than the feature dimensions.
    Returns 0 when either representation is constant.
    """
    A64 = A.astype(np.float64, copy=False)
    B64 = B.astype(np.float64, copy=False)
    A64 = A64 - A64.mean(axis=0)
    B64 = B64 - B64.mean(axis=0)
    n = A64.shape[0]
    if n <= max(A64.shape[1], B64.shape[1]):
        K = A64 @ A64.T  # (n, n)
        L = B64 @ B64.T  # (n, n)
        num = float(np.vdot(K, L))
        den = float(np.linalg.norm(K) * np.linalg.norm(L))
    else:
        num = float(np.linalg.norm(B64.T @ A64) ** 2)
        den = float(np.linalg.norm(A64.T @ A64) * np.linalg.norm(B64.T @ B64))
    return 0.0 if den == 0.0 else num / den
