"""Internal-activation stability, per layer and pooling, from pooled hidden states.

Input H: (n_layers + 1, E, V, d) for one pooling, variant 0 = canonical, every example with the same
variant layout ``families`` (V,).

  dispersion_raw[l, e, f] = mean pairwise cosine distance among example e's variants (canonical + family
                            f, or all meaning-preserving variants for f = None)
  dispersion[l, e, f]     = dispersion_raw / mean cosine distance between canonical variants of
                            *different* examples at layer l (0 = variants collapse, 1 = a rewording moves
                            the representation as far as another question)
  knn_instability[l,e,f]  = 1 - |kNN_canonical(e) ∩ kNN_f(e)| / k, neighbours among the other examples
                            (k = min(10, E - 2)), averaged over the family's variants
  cka[l, f] (dataset)     = linear CKA between canonical and family-f representations (first variant of f)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sago_fast.kernels import linear_cka, pairwise_batched, pairwise_layers
from sago_fast.kernels.gram import cosine_matrix

AXIS = "activation"
KNN_K = 10


@dataclass(frozen=True)
class LayerScores:
    """Column arrays for the ``layer_scores`` table (one row per example × layer × metric × family)."""

    example_index: np.ndarray  # (rows,) int
    layer: np.ndarray  # (rows,) int
    metric: list[str]
    family: list[str | None]
    value: np.ndarray  # (rows,) float64


def _pair_mask(members: np.ndarray) -> np.ndarray:
    """(V,) bool -> (V*(V-1)/2,) bool: pairs (pdist order) with both ends in ``members``."""
    i, j = np.triu_indices(len(members), 1)
    return members[i] & members[j]


def _neighbours(X: np.ndarray, k: int) -> np.ndarray:
    """(E, d) -> (E, k) indices of the k nearest other rows by cosine distance (ties: lower index)."""
    dist = cosine_matrix(X)
    np.fill_diagonal(dist, np.inf)
    return np.argsort(dist, axis=1, kind="stable")[:, :k]


def activation_scores(
    H: np.ndarray, families: Sequence[str], meaning_preserving: np.ndarray, family_list: Sequence[str | None]
) -> tuple[LayerScores, list[tuple[int, str, str, float]]]:
    """Returns per-example layer scores and dataset-level rows (layer, metric, family, value)."""
    n_layers, n_examples = H.shape[:2]
    fam = np.asarray(families)
    pair_d = pairwise_layers(H, "cosine", check=False)  # (L, E, P)
    canonical = H[:, :, 0]  # (L, E, d)
    between = (
        pairwise_batched(canonical, "cosine", check=False).mean(axis=1)
        if n_examples > 1
        else np.full(n_layers, np.nan)
    )
    ex_idx, layers, metrics, fams, values = [], [], [], [], []
    dataset_rows: list[tuple[int, str, str, float]] = []
    layer_ids = np.repeat(np.arange(n_layers), n_examples)
    example_ids = np.tile(np.arange(n_examples), n_layers)

    def add(metric: str, family: str | None, grid: np.ndarray) -> None:  # grid (L, E)
        ex_idx.append(example_ids)
        layers.append(layer_ids)
        metrics.extend([metric] * grid.size)
        fams.extend([family] * grid.size)
        values.append(grid.reshape(-1))

    for family in family_list:
        members = (
            meaning_preserving.astype(bool) if family is None else (fam == "canonical") | (fam == family)
        )
        mask = _pair_mask(members)
        if not mask.any():
            continue
        raw = pair_d[:, :, mask].mean(axis=2)  # (L, E)
        add("dispersion_raw", family, raw)
        with np.errstate(invalid="ignore", divide="ignore"):
            add("dispersion", family, raw / between[:, None])
    k = min(KNN_K, n_examples - 2)  # with all E - 1 others as neighbours the overlap is always 1
    for family in [f for f in family_list if f is not None]:
        variant_ids = np.where(fam == family)[0]
        if len(variant_ids) == 0 or k < 1:
            continue
        instability = np.zeros((n_layers, n_examples))
        for layer in range(n_layers):
            base = _neighbours(canonical[layer], k)
            for v in variant_ids:
                other = _neighbours(H[layer, :, v], k)
                overlap = np.array([len(np.intersect1d(base[e], other[e])) for e in range(n_examples)]) / k
                instability[layer] += 1.0 - overlap
            dataset_rows.append(
                (layer, "cka", family, linear_cka(canonical[layer], H[layer, :, variant_ids[0]]))
            )
        add("knn_instability", family, instability / len(variant_ids))
    for layer in range(n_layers):
        dataset_rows.append((layer, "between_example_distance", "canonical", float(between[layer])))
    scores = LayerScores(
        example_index=np.concatenate(ex_idx) if ex_idx else np.zeros(0, dtype=int),
        layer=np.concatenate(layers) if layers else np.zeros(0, dtype=int),
        metric=metrics,
        family=fams,
        value=np.concatenate(values) if values else np.zeros(0),
    )
    return scores, dataset_rows
