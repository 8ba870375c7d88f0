"""How to spend the next budget: each headline metric's variance components and the families per item m
that minimise its interval per token (two-stage sampling: items, then families within an item).

From a run's per-family item scores y[i, f] (m_i of the K families of item i: all of them under the full
design): the within-item variance S_w² (the mean over items of the variance across their families) and the
variance of the item means S_b²; the between-item component is sigma_b² = S_b² - S_w² (1/m - 1/K) (at least
0; m the mean families scored per item). Drawing m of K families of each of n
items, the mean's variance is (sigma_b² + S_w² (1/m - 1/K)) / n, and an item costs c0 + c1 m renderings
(c0: the canonical, its replicate re-run and the non-preserving variants; c1: k variants a family). At a
fixed number of renderings the variance is proportional to (sigma_b² + S_w² (1/m - 1/K)) (c0 + c1 m); the
best m minimises it over 1..K (``best_m``), and ``cost_at_best`` is that product at best m over the full
design's (m = K): below 1, the sampled design reaches the full design's precision for that share of its
tokens. Per-family scores of pair metrics are a guide to the item-level metric, not its exact decomposition.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sago_fast.stats.data import EMPTY, RunData

Columns = dict[str, list]
NON_PRESERVING = ("wrong_hint",)  # families outside every item-level pair metric, rendered on every item


def variance_components(values: np.ndarray) -> tuple[float, float, float, int]:
    """values (n_examples, n_families), NaN where an example has no score of that family: (S_b² of the item
    means, S_w² mean within-item variance, mean K, items with at least two families)."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] < 2:
        return float("nan"), float("nan"), float("nan"), 0
    seen = np.isfinite(values)
    widths = seen.sum(axis=1)
    rows = values[widths >= 2]
    if len(rows) < 2:
        return float("nan"), float("nan"), float("nan"), len(rows)
    means = np.nanmean(rows, axis=1)
    within = np.nanvar(rows, axis=1, ddof=1)
    return (
        float(np.var(means, ddof=1)),
        float(np.mean(within)),
        float(np.mean(widths[widths >= 2])),
        len(rows),
    )


def best_families_per_item(
    between: float, within: float, scored: float, k: int, costs: tuple[float, float]
) -> tuple[int, float]:
    """(the m in 1..K minimising variance x cost per item, that product over the full design's); ``scored``:
    the mean families per item the variances come from; costs: (c0, c1) renderings per item and family."""
    families = max(k, 1)
    fixed_cost, family_cost = costs
    sigma_b = max(between - within * (1.0 / scored - 1.0 / families), 0.0)

    def product(m: int) -> float:
        return (sigma_b + within * (1.0 / m - 1.0 / families)) * (fixed_cost + family_cost * m)

    full = product(families)
    best = min(range(1, families + 1), key=product)
    return best, (product(best) / full if full > 0 else float("nan"))


def design_advice(data: RunData, headline: Callable[[RunData, str], list], out: Columns) -> None:
    """``design_advice`` rows: per model, dataset and headline item metric (``headline``: the stats'
    headline metrics of a dataset, (axis, metric, family) triples)."""
    for dataset in data.datasets:
        for axis, metric, family in headline(data, dataset):
            if family is not None:
                continue
            for model in data.models:
                by_family = [
                    scores
                    for (m, d, a, name, fam), scores in data.items.items()
                    if (m, d, a, name) == (model, dataset, axis, metric) and fam and fam not in NON_PRESERVING
                ]
                codes = np.unique(np.concatenate([s.codes for s in by_family])) if by_family else EMPTY.codes
                per_item = (
                    np.stack([s.at(codes) for s in by_family], axis=1) if by_family else np.empty((0, 0))
                )
                between, within, scored, n = variance_components(per_item)
                if n < 2:
                    continue
                variants = _variants_per_family(data, dataset)
                families = {family for (d, family) in data.n_variants if d == dataset and family}
                k = len(families - {"canonical", *NON_PRESERVING})
                fixed = 2.0 + variants * len(families & set(NON_PRESERVING))
                best, cost = best_families_per_item(between, within, scored, k, (fixed, variants))
                row: dict[str, object] = {
                    "run_id": data.run_id,
                    "model_id": model,
                    "dataset_id": dataset,
                    "axis": axis,
                    "metric": metric,
                    "n_items": n,
                    "families": k,
                    "families_scored": scored,
                    "between_item_variance": between,
                    "within_item_variance": within,
                    "best_m": best,
                    "cost_at_best": cost,
                }
                for name, cell in row.items():
                    out[name].append(cell)


def _variants_per_family(data: RunData, dataset: str) -> float:
    """k: the variants a family score rests on besides the canonical (the most common count)."""
    counts = [s.values for (d, family), s in data.n_variants.items() if d == dataset and family]
    if not counts:
        return 1.0
    values, times = np.unique(np.concatenate(counts) - 1, return_counts=True)
    return float(values[np.argmax(times)])
