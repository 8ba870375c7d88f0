"""Internal-activation stability, per layer and pooling, from pooled hidden states.

A block holds H: (n_layers + 1, E, V, d) for one pooling and one variant layout (variant 0 = canonical).

  dispersion_raw[l, e, f] = mean pairwise cosine distance among example e's variants (canonical + family
                            f, or all meaning-preserving variants for f = None)          (layer scorer)
  replicate_distance[l,e] = cosine distance between the canonical variant and its re-run alone
                                                                                          (layer scorer)
  between_example_distance[l] = mean cosine distance between canonical variants of *different* examples:
                            exact from the per-layer sum of unit-length canonical vectors (dataset scorer)
  dispersion[l, e, f]     = dispersion_raw / between_example_distance (0 = variants collapse, 1 = a
                            rewording moves the representation as far as another question) (dataset scorer);
                            left out (no row) at a layer whose between-example distance is 0 or undefined
                            (e.g. layer 0 under last-token pooling, where every prompt ends in the same
                            token, or a unit of one example): a ratio to no spread is not a number
  knn_instability[l,e,f]  = 1 - |kNN(canonical e) ∩ kNN(variant of e)| / k, the neighbours among the
                            canonical renderings of the other examples (k = min(10, E - 2)), averaged over
                            the family's variants: one figure per cell, whichever cells a sampled design
                            drew for the other examples; and
  cka[l, f] (dataset)     = linear CKA between canonical and family-f representations (first variant of f)
                            over the examples with family f (all of them under the full design);
                            both over every example while their activations fit the sample budget, else
                            over a seeded uniform sample of examples (recorded in ``unit_estimators``)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from sago_fast.axes.catalogue import DATASET, LAYER_ITEM, UNIT, MetricSpec, ReplicateNoise
from sago_fast.axes.levels import (
    ActivationBlock,
    ChunkView,
    Partial,
    UnitContext,
    dataset_scorer,
    layer_scorer,
    layout_key,
)
from sago_fast.axes.scored import DatasetScore, Estimator, LayerScores, ScoredRows
from sago_fast.kernels import distances_to_reference, linear_cka
from sago_fast.kernels.gram import cosine_between

AXIS = "activation"
KNN_K = 10
NO_SPREAD = 1e-12  # a mean cosine distance below this is rounding noise of parallel vectors
POOLINGS = ("last", "mean")


def dispersion_raw(block: ActivationBlock) -> dict[str | None, np.ndarray]:
    """family -> (n_layers + 1, E) mean pairwise cosine distance among each example's variants of the
    family (canonical + the family's, or every meaning-preserving one for None), each pair weighted by 1 /
    its inclusion probability under a sampled design; NaN for an example without the family's pairs."""
    out = {}
    for family in block.families:
        weights = block.pair_weights(family)  # (E, P)
        total = weights.sum(axis=1)
        if not total.any():
            continue
        if block.family_grid is None and block.inclusion is None:  # one set of pairs: the plain mean
            out[family] = block.pair_distances[:, :, weights[0] > 0].mean(axis=2)
            continue
        summed = np.einsum("lep,ep->le", block.pair_distances, weights)
        out[family] = np.divide(summed, total, out=np.full_like(summed, np.nan), where=total > 0)
    return out


@layer_scorer(
    "dispersion_raw",
    AXIS,
    metrics=[
        MetricSpec(
            "dispersion_raw",
            LAYER_ITEM,
            unit="cosine distance",
            null="replicate",
            sesoi=0.005,
            bounds=(0.0, 2.0),
            noise=ReplicateNoise("replicate_distance", "pair"),
        )
    ],
)
def _dispersion_raw_rows(block: ActivationBlock, context: UnitContext) -> list[LayerScores]:
    if block.layout not in context.scored_layouts:
        return []
    ids = list(block.example_ids)
    grids = [
        LayerScores.grid(ids, block.pooling, "dispersion_raw", family, raw)
        for family, raw in dispersion_raw(block).items()
    ]
    return [grid if np.isfinite(grid.value).all() else grid.select(np.isfinite(grid.value)) for grid in grids]


@layer_scorer(
    "replicate_distance",
    AXIS,
    metrics=[MetricSpec("replicate_distance", ("layer_scores",), unit="cosine distance")],
)
def _replicate_rows(block: ActivationBlock, context: UnitContext) -> list[LayerScores]:
    """The noise floor: each canonical representation against the same prompt re-run alone."""
    n_layers, n_examples = block.hidden.shape[:2]
    pair = np.stack([block.hidden[:, :, 0], block.replicate], axis=2)  # (L, E, 2, d)
    dist = distances_to_reference(pair.reshape(n_layers * n_examples, 2, -1), "cosine", 0, check=False)
    grid = dist[:, 1].reshape(n_layers, n_examples)
    return [LayerScores.grid(list(block.example_ids), block.pooling, "replicate_distance", "canonical", grid)]


# -- dispersion: raw values per chunk, normalised once the between-example distance is known ---------
def unit_vector_sums(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(L, E, d) -> per layer: the sum over examples of the unit-length rows (L, d) float64, the nonzero
    rows (L,) and the zero rows (L,). Zero rows (no direction) follow the cosine kernels: distance 1 to any
    other row, 0 to each other."""
    X64 = X.astype(np.float64)
    norms = np.linalg.norm(X64, axis=2, keepdims=True)  # (L, E, 1)
    units = np.divide(X64, norms, out=np.zeros_like(X64), where=norms > 0)
    n_nonzero = (norms[..., 0] > 0).sum(axis=1)
    return units.sum(axis=1), n_nonzero, X.shape[1] - n_nonzero


def between_example_distance(unit_sum: np.ndarray, n_nonzero: np.ndarray, n_zero: np.ndarray) -> np.ndarray:
    """(L, d) sums and (L,) counts -> (L,) mean cosine distance over pairs of different examples (NaN
    below 2 examples).

    Over unit vectors u, sum_{i<j} u_i·u_j = (|Σu|² - n)/2, so the mean distance needs only the sums.
    The subtraction leaves rounding noise of ~1e-16·n² where all vectors are parallel: means below
    NO_SPREAD (far below what float32 hidden states resolve) are 0, as the pairwise kernels give."""
    nz = np.asarray(n_nonzero, dtype=np.float64)
    n = nz + np.asarray(n_zero, dtype=np.float64)
    pairs = n * (n - 1) / 2
    similarity = ((unit_sum**2).sum(axis=1) - nz) / 2  # sum of cosines over nonzero pairs
    distance = nz * (nz - 1) / 2 - similarity + (n - nz) * nz
    mean = np.maximum(distance, 0.0) / np.where(pairs > 0, pairs, 1)
    return np.where(pairs > 0, np.where(mean < NO_SPREAD, 0.0, mean), np.nan)


def _key(block: ActivationBlock) -> str:
    return f"{layout_key(block.layout)}#{block.pooling}"


def _family_key(family: str | None) -> str:
    return "*" if family is None else family


def _grouped(partials: Sequence[Mapping[str, np.ndarray]]) -> dict[str, dict[str, list[np.ndarray]]]:
    """block key -> name -> the arrays of every chunk that had that block, in chunk order."""
    out: dict[str, dict[str, list[np.ndarray]]] = defaultdict(lambda: defaultdict(list))
    for partial in partials:
        for name in partial:
            block, field = name.split("@", 1)
            out[block][field].append(partial[name])
    return out


@dataset_scorer(
    "dispersion",
    metrics=[
        MetricSpec(
            "dispersion",
            LAYER_ITEM,
            unit="ratio to between-example distance",
            headline=0,
            label="dispersion, mean over layers (cosine dist. ÷ between-example dist.)",
        ),
        MetricSpec("between_example_distance", DATASET, unit="cosine distance"),
    ],
)
class Dispersion:
    """Dispersion normalised by the between-example distance of the whole unit; a layer whose examples do
    not spread (between-example distance 0, or fewer than 2 examples) has no dispersion rows."""

    axis = AXIS

    def partial(self, chunk: ChunkView) -> Partial:
        out: Partial = {}
        for block in chunk.scored_blocks():
            key = _key(block)
            unit_sum, n_nonzero, n_zero = unit_vector_sums(block.hidden[:, :, 0])
            out[f"{key}@unit_sum"] = unit_sum
            out[f"{key}@counts"] = np.stack([n_nonzero, n_zero])  # (2, L)
            out[f"{key}@ids"] = np.array(block.example_ids, dtype=str)
            for family, raw in dispersion_raw(block).items():
                has = np.isfinite(raw).all(axis=0)  # (E,) the examples with the family's pairs
                out[f"{key}@raw={_family_key(family)}"] = raw[:, has]
                out[f"{key}@with={_family_key(family)}"] = np.array(block.example_ids, dtype=str)[has]
        return out

    def finish(self, partials: Sequence[Mapping[str, np.ndarray]], context: UnitContext) -> ScoredRows:
        rows = ScoredRows()
        for key, fields in sorted(_grouped(partials).items()):
            pooling = key.rsplit("#", 1)[1]
            counts = np.sum(fields["counts"], axis=0)
            between = between_example_distance(np.sum(fields["unit_sum"], axis=0), counts[0], counts[1])
            spread = between > NO_SPREAD  # (L,) False where the ratio has no denominator (NaN included)
            for name in sorted(f for f in fields if f.startswith("raw=")):
                family = name[4:]
                raw = np.concatenate(fields[name], axis=1)  # (L, E of the family)
                with_family = fields.get(f"with={family}", fields["ids"])  # (partials before "with": all)
                ids = [str(x) for part in with_family for x in part]
                value = raw / np.where(spread, between, 1.0)[:, None]
                grid = LayerScores.grid(ids, pooling, "dispersion", None if family == "*" else family, value)
                if spread.any():
                    rows.layers.append(grid.select(spread[grid.layer]))
            rows.datasets += [
                DatasetScore(AXIS, "between_example_distance", "canonical", layer, pooling, float(d))
                for layer, d in enumerate(between)
            ]
        return rows


# -- neighbourhoods (kNN, CKA): need every example at once, so an example sample beyond a budget ------
NEIGHBOUR_BLOCK = 512  # rows of the distance matrix sorted at a time


def _neighbours(X: np.ndarray, own: np.ndarray, C: np.ndarray, k: int) -> np.ndarray:
    """(n, d) rows X[r] of example ``own[r]`` against the (E, d) canonical rows C -> (n, k) indices of the k
    rows of C nearest X[r] by cosine distance, its own example's left out (ties: lower index), sorted
    NEIGHBOUR_BLOCK rows at a time so only the distance matrix itself is (n, E)."""
    dist = cosine_between(X, C)
    dist[np.arange(len(own)), own] = np.inf
    out = np.empty((X.shape[0], k), dtype=np.int64)
    for start in range(0, X.shape[0], NEIGHBOUR_BLOCK):
        block = dist[start : start + NEIGHBOUR_BLOCK]
        out[start : start + NEIGHBOUR_BLOCK] = np.argsort(block, axis=1, kind="stable")[:, :k]
    return out


def _overlap(a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """(n, k) and (n, k) neighbour indices -> (n,) share of each row's neighbours in both."""
    return np.array([len(np.intersect1d(x, y)) for x, y in zip(a, b, strict=True)]) / k


def knn_instability(
    H: np.ndarray, family_grid: np.ndarray, family: str, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """H (L, E, V, d), family_grid (E, V) -> (the examples with family-f variants (E_f,) positions, (L, E_f)):
    the share of each example's k nearest canonical renderings of the other examples that are not among
    the k nearest to its family-f variant, averaged over those variants. The neighbours are always the
    canonical renderings of every other example, so the figure is one per cell: it does not depend on
    which cells a sampled design drew for the other examples."""
    examples, columns = np.nonzero(family_grid == family)
    with_family = np.unique(examples)
    position = np.searchsorted(with_family, examples)
    counts = np.bincount(position, minlength=len(with_family))
    instability = np.zeros((H.shape[0], len(with_family)))
    for layer in range(H.shape[0]):
        canonical = H[layer, :, 0]
        base = _neighbours(canonical[with_family], with_family, canonical, k)
        moved = _neighbours(H[layer, examples, columns], examples, canonical, k)
        lost = 1.0 - _overlap(base[position], moved, k)
        instability[layer] = np.bincount(position, weights=lost, minlength=len(with_family)) / counts
    return with_family, instability


@dataset_scorer(
    "neighbourhood",
    metrics=[
        MetricSpec("knn_instability", LAYER_ITEM, null="tolerance", bounds=UNIT),
        MetricSpec("cka", DATASET, direction="lower", unit="linear CKA"),
    ],
)
class Neighbourhood:
    """kNN instability and linear CKA over the unit's examples (or its seeded sample)."""

    axis = AXIS

    def partial(self, chunk: ChunkView) -> Partial:
        out: Partial = {}
        sample = chunk.context.sample
        for block in chunk.scored_blocks():
            keep = [i for i, e in enumerate(block.example_ids) if sample is None or e in sample]
            if keep:
                key = _key(block)
                out[f"{key}@hidden"] = block.hidden[:, keep]
                out[f"{key}@ids"] = np.array([block.example_ids[i] for i in keep], dtype=str)
                if block.family_grid is not None:
                    out[f"{key}@families"] = block.family_grid[keep].astype(str)
        return out

    def finish(self, partials: Sequence[Mapping[str, np.ndarray]], context: UnitContext) -> ScoredRows:
        rows = ScoredRows()
        groups = _grouped(partials)
        for key, fields in sorted(groups.items()):
            layout_text, pooling = key.rsplit("#", 1)
            H = np.concatenate(fields["hidden"], axis=1)  # (L, E, V, d)
            ids = [str(x) for part in fields["ids"] for x in part]
            if "families" in fields:  # a sampled design: each example's own drawn families
                grid = np.concatenate(fields["families"], axis=0)
            else:
                grid = np.array([layout_text.split("|")] * len(ids))
            k = min(KNN_K, len(ids) - 2)  # with all E - 1 others as neighbours the overlap is always 1
            if k < 1:
                continue
            for family in sorted(set(grid.ravel()) - {"canonical"}):
                examples, instability = knn_instability(H, grid, family, k)
                mine = [ids[e] for e in examples]
                rows.layers.append(LayerScores.grid(mine, pooling, "knn_instability", family, instability))
                first = (grid[examples] == family).argmax(axis=1)  # (E_f,) each one's first family-f column
                if len(examples) < 2:
                    continue
                rows.datasets += [
                    DatasetScore(
                        AXIS,
                        "cka",
                        family,
                        layer,
                        pooling,
                        linear_cka(H[layer, examples, 0], H[layer, examples, first]),
                    )
                    for layer in range(H.shape[0])
                ]
        if groups:
            how, size = (
                ("exact", context.n_examples) if context.sample is None else ("sample", len(context.sample))
            )
            rows.estimators += [
                Estimator(metric, how, size, context.n_examples, context.seed)
                for metric in ("knn_instability", "cka")
            ]
        return rows
