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
  knn_instability[l,e,f]  = 1 - |kNN_canonical(e) ∩ kNN_f(e)| / k, neighbours among the other examples
                            (k = min(10, E - 2)), averaged over the family's variants; and
  cka[l, f] (dataset)     = linear CKA between canonical and family-f representations (first variant of f)
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
from sago_fast.kernels.gram import cosine_matrix

AXIS = "activation"
KNN_K = 10
NO_SPREAD = 1e-12  # a mean cosine distance below this is rounding noise of parallel vectors
POOLINGS = ("last", "mean")


def _pair_mask(members: np.ndarray) -> np.ndarray:
    """(V,) bool -> (V*(V-1)/2,) bool: pairs (pdist order) with both ends in ``members``."""
    i, j = np.triu_indices(len(members), 1)
    return members[i] & members[j]


def dispersion_raw(block: ActivationBlock) -> dict[str | None, np.ndarray]:
    """family -> (n_layers + 1, E) mean pairwise cosine distance among the family's variants."""
    out = {}
    for family in block.families:
        mask = _pair_mask(block.members(family))
        if mask.any():
            out[family] = block.pair_distances[:, :, mask].mean(axis=2)
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
    return [
        LayerScores.grid(ids, block.pooling, "dispersion_raw", family, raw)
        for family, raw in dispersion_raw(block).items()
    ]


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
                out[f"{key}@raw={_family_key(family)}"] = raw
        return out

    def finish(self, partials: Sequence[Mapping[str, np.ndarray]], context: UnitContext) -> ScoredRows:
        rows = ScoredRows()
        for key, fields in sorted(_grouped(partials).items()):
            pooling = key.rsplit("#", 1)[1]
            counts = np.sum(fields["counts"], axis=0)
            between = between_example_distance(np.sum(fields["unit_sum"], axis=0), counts[0], counts[1])
            ids = [str(x) for part in fields["ids"] for x in part]
            spread = between > NO_SPREAD  # (L,) False where the ratio has no denominator (NaN included)
            for name in sorted(f for f in fields if f.startswith("raw=")):
                family = name[4:]
                raw = np.concatenate(fields[name], axis=1)  # (L, E)
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


def _neighbours(X: np.ndarray, k: int) -> np.ndarray:
    """(E, d) -> (E, k) indices of the k nearest other rows by cosine distance (ties: lower index), sorted
    NEIGHBOUR_BLOCK rows at a time so only the distance matrix itself is (E, E)."""
    dist = cosine_matrix(X)
    np.fill_diagonal(dist, np.inf)
    out = np.empty((X.shape[0], k), dtype=np.int64)
    for start in range(0, X.shape[0], NEIGHBOUR_BLOCK):
        block = dist[start : start + NEIGHBOUR_BLOCK]
        out[start : start + NEIGHBOUR_BLOCK] = np.argsort(block, axis=1, kind="stable")[:, :k]
    return out


def knn_instability(H: np.ndarray, layout: Sequence[str], family: str, k: int) -> np.ndarray:
    """H (L, E, V, d) -> (L, E): share of each example's k canonical neighbours not among the neighbours
    of its family-f variants, averaged over those variants."""
    fam = np.asarray(layout)
    variant_ids = np.where(fam == family)[0]
    n_layers, n_examples = H.shape[:2]
    instability = np.zeros((n_layers, n_examples))
    for layer in range(n_layers):
        base = _neighbours(H[layer, :, 0], k)
        for v in variant_ids:
            other = _neighbours(H[layer, :, v], k)
            overlap = np.array([len(np.intersect1d(base[e], other[e])) for e in range(n_examples)]) / k
            instability[layer] += 1.0 - overlap
    return instability / len(variant_ids)


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
        return out

    def finish(self, partials: Sequence[Mapping[str, np.ndarray]], context: UnitContext) -> ScoredRows:
        rows = ScoredRows()
        groups = _grouped(partials)
        for key, fields in sorted(groups.items()):
            layout_text, pooling = key.rsplit("#", 1)
            layout = layout_text.split("|")
            H = np.concatenate(fields["hidden"], axis=1)  # (L, E, V, d)
            ids = [str(x) for part in fields["ids"] for x in part]
            k = min(KNN_K, len(ids) - 2)  # with all E - 1 others as neighbours the overlap is always 1
            if k < 1:
                continue
            for family in sorted(set(layout) - {"canonical"}):
                instability = knn_instability(H, layout, family, k)
                rows.layers.append(LayerScores.grid(ids, pooling, "knn_instability", family, instability))
                first = layout.index(family)
                rows.datasets += [
                    DatasetScore(
                        AXIS, "cka", family, layer, pooling, linear_cka(H[layer, :, 0], H[layer, :, first])
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
