"""The registered metrics: how rows are prepared (dtype, per-row aux) and which kernel compares two rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sago_fast.errors import InputError
from sago_fast.kernels import distribution, vector
from sago_fast.kernels.drivers import row_aux
from sago_fast.registry import Registry

DISTRIBUTION_SUM_TOL = 1e-3  # rows of a distribution must sum to 1 within this (float32 softmax rounding)


@dataclass(frozen=True)
class Metric:
    """kind: "vector" (any finite rows) or "distribution" (non-negative rows summing to 1).

    prepare: rows (m, d) -> (rows the kernel reads, aux (m,) float64). kernel: (u, v, aux_u, aux_v).
    symmetric: d(u, v) == d(v, u) (KL is not; pairs are (i < j) as KL(X[i] || X[j])).
    """

    name: str
    kind: str
    kernel: Any
    prepare: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
    symmetric: bool = True


METRICS: Registry[Metric] = Registry("metric")


def _no_aux(rows: np.ndarray) -> np.ndarray:
    return np.zeros(rows.shape[0], dtype=np.float64)


def _as_float(rows: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(rows if rows.dtype in (np.float32, np.float64) else rows.astype(np.float64))


def _prepare_plain(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = _as_float(rows)
    return rows, _no_aux(rows)


def _prepare_cosine(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = _as_float(rows)
    return rows, row_aux(rows, vector.row_norm)


def _prepare_js(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = np.ascontiguousarray(rows, dtype=np.float32)  # the vectorised log works on float32
    return rows, row_aux(rows, distribution.neg_entropy)


def _prepare_hellinger(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = np.sqrt(_as_float(rows))
    return rows, _no_aux(rows)


for _metric in (
    Metric("cosine", "vector", vector.cosine, _prepare_cosine),
    Metric("euclidean", "vector", vector.euclidean, _prepare_plain),
    Metric("sqeuclidean", "vector", vector.sqeuclidean, _prepare_plain),
    Metric("kl", "distribution", distribution.kl, _prepare_plain, symmetric=False),
    Metric("js", "distribution", distribution.js, _prepare_js),
    Metric("tv", "distribution", distribution.tv, _prepare_plain),
    Metric("hellinger", "distribution", distribution.hellinger_sqrt_rows, _prepare_hellinger),
):
    METRICS.add(_metric.name, _metric)


def validate(X: np.ndarray, metric: Metric, name: str = "X") -> None:
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
