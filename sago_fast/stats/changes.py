"""What changed over training: each checkpoint against the one before it, per (dataset, headline metric).

A training run's checkpoints are ordered by step (``checkpoint_names``); each consecutive pair is read
from ``model_comparisons`` (the same paired test for every metric: sign-flip permutation and studentized
bootstrap together, :func:`sago_fast.stats.methods.paired_mean_difference`), turned to "later minus earlier", and the p-values of this family of consecutive
comparisons are adjusted together (Benjamini–Hochberg). Consecutive steps with identical weights are
recorded with a change of 0 and no test. ``significant``: adjusted p below ``alpha``; for checkpoints
compared with ``sago run --until-separated``, whose units stopped on these differences, the paired
anytime-valid sequence is the CI (no p-value) and ``significant`` means it excludes 0; those sequences
are built at alpha split over the run's comparisons (:mod:`sago_fast.units.separation`), so the family's
error is controlled either way (:func:`sago_fast.stats.methods.comparison_significant`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from sago_fast.stats.confidence_sequences import SEPARATION_TEST
from sago_fast.stats.methods import bh_adjust, comparison_significant

Columns = dict[str, list[Any]]
IDENTICAL = "identical weights"


def training_runs(positions: Sequence[tuple[str, str, int]]) -> dict[str, list[tuple[int, str]]]:
    """(model_id, training_run, step) rows -> training run -> [(step, model_id)] in step order (one per
    step: a step named twice keeps its first model)."""
    runs: dict[str, dict[int, str]] = defaultdict(dict)
    for model, run, step in positions:
        runs[run].setdefault(int(step), model)
    return {run: sorted(steps.items()) for run, steps in runs.items() if len(steps) > 1}


def _comparison_index(comparisons: Mapping[str, list[Any]]) -> dict[tuple, int]:
    """(dataset, axis, metric, model_a, model_b) -> row of ``model_comparisons``."""
    keys = zip(
        comparisons["dataset_id"],
        comparisons["axis"],
        comparisons["metric"],
        comparisons["model_a"],
        comparisons["model_b"],
        strict=True,
    )
    return {key: i for i, key in enumerate(keys)}


def checkpoint_changes(
    run_id: str,
    runs: Mapping[str, list[tuple[int, str]]],
    headlines: Mapping[str, Sequence[tuple[str, str, str | None]]],
    comparisons: Mapping[str, list[Any]],
    alpha: float,
) -> Columns:
    """``checkpoint_changes`` rows. runs: from :func:`training_runs`; headlines: dataset -> (axis, metric,
    family) compared; comparisons: the ``model_comparisons`` columns of the run."""
    index = _comparison_index(comparisons) if comparisons else {}
    out: Columns = defaultdict(list)
    for run, steps in sorted(runs.items()):
        for (step_from, model_from), (step_to, model_to) in pairwise(steps):
            for dataset, metrics in sorted(headlines.items()):
                for axis, metric, family in metrics:
                    row = _change(index, comparisons, dataset, axis, metric, model_from, model_to)
                    if row is None:
                        continue
                    for name, value in {
                        "run_id": run_id,
                        "dataset_id": dataset,
                        "axis": axis,
                        "metric": metric,
                        "family": family,
                        "training_run": run,
                        "step_from": step_from,
                        "step_to": step_to,
                        "model_from": model_from,
                        "model_to": model_to,
                        **row,
                    }.items():
                        out[name].append(value)
    p = np.array([np.nan if v is None else v for v in out["p_value"]], dtype=np.float64)
    adjusted = bh_adjust(p) if len(p) else p
    out["p_adjusted"] = [None if np.isnan(x) else float(x) for x in adjusted]
    out["significant"] = [
        comparison_significant(test == SEPARATION_TEST, adjusted, low, high, alpha)
        for test, low, high, adjusted in zip(
            out["test"], out["ci_low"], out["ci_high"], out["p_adjusted"], strict=True
        )
    ]
    return dict(out)


def _change(
    index: Mapping[tuple, int],
    comparisons: Mapping[str, list[Any]],
    dataset: str,
    axis: str,
    metric: str,
    model_from: str,
    model_to: str,
) -> dict[str, Any] | None:
    """One consecutive pair as later minus earlier, or None when the pair was not compared."""
    if model_from == model_to:
        return {
            "test": IDENTICAL,
            "mean_from": None,
            "mean_to": None,
            "change": 0.0,
            "ci_low": 0.0,
            "ci_high": 0.0,
            "p_value": None,
            "n_items": None,
        }
    forward = index.get((dataset, axis, metric, model_to, model_from))  # a - b is already later - earlier
    backward = index.get((dataset, axis, metric, model_from, model_to))
    i = forward if forward is not None else backward
    if i is None:
        return None
    sign = 1.0 if forward is not None else -1.0
    low, high = comparisons["ci_low"][i], comparisons["ci_high"][i]
    if sign < 0:
        low, high = (None if high is None else -high), (None if low is None else -low)
    mean_a, mean_b = comparisons["mean_a"][i], comparisons["mean_b"][i]
    return {
        "test": comparisons["test"][i],
        "mean_from": mean_b if sign > 0 else mean_a,
        "mean_to": mean_a if sign > 0 else mean_b,
        "change": sign * comparisons["difference"][i],
        "ci_low": low,
        "ci_high": high,
        "p_value": comparisons["p_value"][i],
        "n_items": comparisons["n_items"][i],
    }
