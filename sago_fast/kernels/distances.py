"""The registered metrics: how rows are prepared (dtype, per-row aux) and which kernel compares two rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sago_fast.errors import InputError
from sago_fast.kernels import distribution, tiled, vector
from sago_fast.kernels.distribution import has_zero, hellinger_sqrt_rows, js, kl_packed, neg_entropy, tv
from sago_fast.kernels.vector import zero_aux
from sago_fast.registry import Registry

DISTRIBUTION_SUM_TOL = 1e-3  # rows of a distribution must sum to 1 within this (float32 softmax rounding)


@dataclass(frozen=True)
class Distance:
    """kind: "vector" (any finite rows) or "distribution" (non-negative rows summing to 1).

    prepare: rows (m, d) -> rows the kernel reads (dtype conversion, sqrt or log rows), one pass.
    aux: jitted row -> float64 computed by the drivers per row while it is in cache (norm, entropy).
    kernel: jitted (u, v, aux_u, aux_v) -> float64.
    symmetric: d(u, v) == d(v, u) (KL is not; pairs are (i < j) as KL(X[i] || X[j])).
    """

    name: str
    kind: str
    kernel: Any
    prepare: Callable[[np.ndarray], np.ndarray]
    aux: Any = zero_aux
    symmetric: bool = True
    tiled: Any = None  # optional jitted X_e (n, d) -> condensed, register-tiled over all pairs


DISTANCES: Registry[Distance] = Registry("distance")


def _as_float(rows: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(rows if rows.dtype in (np.float32, np.float64) else rows.astype(np.float64))


def _as_float32(rows: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(rows, dtype=np.float32)  # the vectorised log works on float32


def _packed_log_rows(rows: np.ndarray) -> np.ndarray:
    """[p | log p] per row (log 0 stored as 0), so each KL pair only multiplies and adds."""
    rows = _as_float(rows)
    d = rows.shape[-1]
    flat = rows.reshape(-1, d)
    packed = np.empty((flat.shape[0], 2 * d), dtype=rows.dtype)
    packed[:, :d] = flat
    log_rows = distribution.log_rows32 if rows.dtype == np.float32 else distribution.log_rows64
    log_rows(flat, packed[:, d:])
    return packed.reshape(*rows.shape[:-1], 2 * d)


def _sqrt_rows(rows: np.ndarray) -> np.ndarray:
    return np.sqrt(_as_float(rows))


for _metric in (
    Distance("cosine", "vector", vector.cosine, _as_float, aux=vector.row_norm, tiled=tiled.cosine_condensed),
    Distance("euclidean", "vector", vector.euclidean, _as_float, tiled=tiled.euclidean_condensed),
    Distance("sqeuclidean", "vector", vector.sqeuclidean, _as_float, tiled=tiled.sqeuclidean_condensed),
    Distance("kl", "distribution", kl_packed, _packed_log_rows, aux=has_zero, symmetric=False),
    Distance("js", "distribution", js, _as_float32, aux=neg_entropy),
    Distance("tv", "distribution", tv, _as_float, tiled=tiled.tv_condensed),
    Distance("hellinger", "distribution", hellinger_sqrt_rows, _sqrt_rows, tiled=tiled.hellinger_condensed),
):
    DISTANCES.add(_metric.name, _metric)


def validate(X: np.ndarray, metric: Distance, name: str = "X") -> None:
    """Finite input; for distributions, non-negative rows summing to 1. One clear error otherwise."""
    if X.ndim < 2:
        raise InputError(f"{name} must have at least 2 dimensions (rows, features), got shape {X.shape}")
    if X.shape[-1] == 0:
        raise InputError(f"{name} has zero-length rows")
    finite = np.isfinite(X)
    if not finite.all():
        where = np.argwhere(~finite.reshape(-1, X.shape[-1]).all(axis=1))[0, 0]
        raise InputError(f"{name} contains NaN or inf (row {int(where)} of the flattened rows)")
    if metric.kind == "distribution":
        flat = X.reshape(-1, X.shape[-1])
        if (flat < 0).any():
            raise InputError(f"{name}: metric {metric.name!r} needs non-negative distributions")
        sums = flat.sum(axis=1, dtype=np.float64)
        bad = np.abs(sums - 1.0) > DISTRIBUTION_SUM_TOL
        if bad.any():
            row = int(np.argmax(bad))
            raise InputError(
                f"{name}: row {row} sums to {sums[row]:.6g}, not 1 (metric {metric.name!r} takes distributions)"
            )
