"""Public kernel entry points. Each picks the fastest correct formulation for the shape it gets."""

from __future__ import annotations

from types import ModuleType

import numpy as np

from sago_fast.errors import InputError
from sago_fast.kernels.distances import DISTANCES, Distance, validate
from sago_fast.kernels.gram import cosine_matrix, kl_matrix
from sago_fast.kernels.specialise import drivers_for

# From this many variants per example on, cosine uses the BLAS Gram form (below: a register-tiled Numba
# Gram) and KL the two-matmul form
# (crossovers measured with benchmarks/bench_kernels.py).
COSINE_GRAM_MIN_ROWS = 48
KL_MATMUL_MIN_ROWS = 256  # the Numba KL (packed log rows) won up to 128 variants at 32k vocab
# Below this many element operations (pairs x row length) one thread beats waking a thread pool.
SERIAL_MAX_WORK = 1 << 21


def _condense(full: np.ndarray) -> np.ndarray:
    """(..., n, n) -> (..., n*(n-1)/2): upper triangle in row-major (pdist) order."""
    n = full.shape[-1]
    i, j = np.triu_indices(n, k=1)
    return np.ascontiguousarray(full[..., i, j])


def _metric(name: str) -> Distance:
    try:
        return DISTANCES.get(name)
    except KeyError as exc:
        raise InputError(str(exc)) from None


def pairwise(X: np.ndarray, metric: str = "cosine", *, check: bool = True) -> np.ndarray:
    """Distances between all rows of X (n, d): condensed (n*(n-1)/2,) float64, in scipy ``pdist`` order.

    metric: cosine | euclidean | sqeuclidean (vectors) or kl | js | tv | hellinger (distributions:
    rows non-negative, summing to 1; natural log; JS not square-rooted, in [0, ln 2]).
    """
    X, m = _checked_input(X, metric, check, "(n, d)")
    if X.shape[0] < 2:
        return np.zeros(0, dtype=np.float64)
    n = X.shape[0]
    blas = _blas_form(X, m)
    if blas is not None:
        return blas
    rows = m.prepare(X)
    if m.tiled is not None:
        return m.tiled(rows)
    serial = n * (n - 1) // 2 * X.shape[1] <= SERIAL_MAX_WORK
    drivers = _drivers(m)
    return (drivers.pairs_one_serial if serial else drivers.pairs_one)(rows)


def _drivers(m: Distance) -> ModuleType:
    """The drivers specialised for ``m`` (cached on disk by Numba: see :mod:`.specialise`)."""
    return drivers_for(m.name, m.kernel, m.aux, m.tiled)


def _checked_input(X: np.ndarray, metric: str, check: bool, axes: str) -> tuple[np.ndarray, Distance]:
    """Shape (``axes``, e.g. "(n, d)") and content checks shared by the entry points."""
    X = np.asarray(X)
    m = _metric(metric)
    ndim = axes.count(",") + 1
    if X.ndim != ndim:
        raise InputError(f"X must be {ndim}-D {axes}, got shape {X.shape}")
    if check:
        validate(X, m)
    return X, m


def _blas_form(X: np.ndarray, m: Distance) -> np.ndarray | None:
    """The matrix-product formulation, condensed, where it beats the loops (many variants); else None."""
    n = X.shape[-2]
    if m.name == "kl" and n >= KL_MATMUL_MIN_ROWS:
        return _condense(kl_matrix(X))
    if m.name == "cosine" and n >= COSINE_GRAM_MIN_ROWS:
        return _condense(cosine_matrix(X))
    return None


def pairwise_batched(X: np.ndarray, metric: str = "cosine", *, check: bool = True) -> np.ndarray:
    """(n_examples, n_variants, d) -> (n_examples, n_pairs): each example's variants against each other."""
    X, m = _checked_input(X, metric, check, "(n_examples, n_variants, d)")
    n_examples, n = X.shape[:2]
    if n < 2:
        return np.zeros((n_examples, 0), dtype=np.float64)
    blas = _blas_form(X, m)
    if blas is not None:
        return blas
    rows = m.prepare(X)
    drivers = _drivers(m)
    return drivers.batched(rows)


def pairwise_layers(H: np.ndarray, metric: str = "cosine", *, check: bool = True) -> np.ndarray:
    """(n_layers, n_examples, n_variants, d) -> (n_layers, n_examples, n_pairs)."""
    H = np.asarray(H)
    if H.ndim != 4:
        raise InputError(f"H must be 4-D (n_layers, n_examples, n_variants, d), got shape {H.shape}")
    n_layers, n_examples, n, d = H.shape
    flat = pairwise_batched(H.reshape(n_layers * n_examples, n, d), metric, check=check)
    return flat.reshape(n_layers, n_examples, -1)


def distances_to_reference(
    X: np.ndarray, metric: str = "cosine", reference: int | np.ndarray = 0, *, check: bool = True
) -> np.ndarray:
    """(n_examples, n_variants, d) -> (n_examples, n_variants): each variant's distance to the
    reference variant (the canonical one) of its example; ``reference`` is one index or one per example.
    For KL the direction is KL(variant || reference).
    """
    X, m = _checked_input(X, metric, check, "(n_examples, n_variants, d)")
    n_examples, n = X.shape[:2]
    ref = np.broadcast_to(np.asarray(reference, dtype=np.int64), (n_examples,)).copy()
    if ((ref < 0) | (ref >= n)).any():
        raise InputError(f"reference index out of range for {n} variants")
    return _drivers(m).to_reference(m.prepare(X), ref)


def topk_overlap(P: np.ndarray, k: int = 10) -> np.ndarray:
    """Condensed share of shared entries among the k most probable entries of each pair of rows (n, V).

    Ties at the k-th value are broken by lower index (a stable, deterministic choice).
    """
    P = np.asarray(P)
    if P.ndim != 2 or not 1 <= k <= P.shape[1]:
        raise InputError(f"P must be (n, V) with 1 <= k <= V; got shape {P.shape}, k={k}")
    if not np.isfinite(P).all():
        raise InputError("P contains NaN or inf")
    top = np.argsort(-P, axis=1, kind="stable")[:, :k]  # (n, k)
    member = np.zeros(P.shape, dtype=np.float64)
    np.put_along_axis(member, top, 1.0, axis=1)
    shared = member @ member.T  # (n, n) counts of shared top-k entries
    return _condense(shared) / k
