"""What the statistics read from a results file: per-example item scores and replicate noise of one run.

Everything is keyed by example so that resampling examples keeps each example's variants together.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from sago_fast.axes.catalogue import CATALOGUE, headline_metrics
from sago_fast.axes.catalogue import axes as catalogue_axes
from sago_fast.axes.catalogue import metric as catalogue_metric
from sago_fast.errors import InputError
from sago_fast.kernels import pairwise
from sago_fast.store import Store
from sago_fast.store.reads import RunReads, latest_finished_run, latest_running_run

# The score of each axis used where one number per axis is needed (rankings, correlations): the first
# metric present for the dataset. All are "higher = less stable".
HEADLINE: dict[str, tuple[str, ...]] = {axis: headline_metrics(axis) for axis in catalogue_axes()}
AXES = tuple(HEADLINE)
ACCURACY = ("accuracy", "accuracy")  # (axis, metric) of canonical correctness, higher = better

Key = tuple[str, str, str, str, str | None]  # (model_id, dataset_id, axis, metric, family)


@dataclass
class RunData:
    """One run's per-example values. ``items[key][example_id] = value``; ``replicate[(model, dataset,
    metric)][example_id]`` = the replicate pair's figure for the metric (the noise floor: the pair's
    distance or JS divergence, or the |gap| in P(gold) between the two runs of the canonical prompt);
    ``canonical[(model, dataset)][example_id] = (p_gold, correct)`` of the canonical variant;
    ``n_variants[(dataset, example_id, family)]`` = variants an item score of that family is computed over
    (family None: every meaning-preserving variant; a family: canonical + its variants)."""

    run_id: str
    items: dict[Key, dict[str, float]] = field(default_factory=dict)
    replicate: dict[tuple[str, str, str], dict[str, float]] = field(default_factory=dict)
    canonical: dict[tuple[str, str], dict[str, tuple[float, bool]]] = field(default_factory=dict)
    n_variants: dict[tuple[str, str, str | None], int] = field(default_factory=dict)
    model_names: dict[str, str] = field(default_factory=dict)
    dataset_names: dict[str, str] = field(default_factory=dict)
    positions: list[tuple[str, str, int]] = field(default_factory=list)  # (model, training run, step)
    # sequential units: (model, dataset, metric) -> (lower, upper) of the final confidence sequence
    sequences: dict[tuple[str, str, str], tuple[float, float]] = field(default_factory=dict)
    # --until-separated: (dataset, model_a, model_b, metric) -> the paired sequence of model_b - model_a
    pair_sequences: dict[tuple[str, str, str, str], tuple[float, float]] = field(default_factory=dict)

    @property
    def models(self) -> list[str]:
        return sorted({k[0] for k in self.items})

    @property
    def datasets(self) -> list[str]:
        return sorted({k[1] for k in self.items})

    def headline(self, dataset_id: str, axis: str) -> tuple[str, str | None] | None:
        """(metric, family) of the axis' headline score on this dataset: the first headline metric present
        at the family the catalogue reads it at (NULL, or e.g. wrong_hint for cue_following)."""
        if axis == ACCURACY[0]:
            return ACCURACY[1], None
        for metric in HEADLINE[axis]:
            family = catalogue_metric(metric).family
            if any(
                k[1] == dataset_id and k[2] == axis and k[3] == metric and k[4] == family for k in self.items
            ):
                return metric, family
        return None


def latest_run(store: Store) -> str:
    """The newest finished run; else the newest run still being written (its statistics then cover the
    chunks committed so far, and its own end computes them again over everything)."""
    run = latest_finished_run(store) or latest_running_run(store)
    if run is None:
        raise InputError(f"{store.path}: no finished run to analyse (run `sago run` first)")
    return run


def check_run(store: Store, run_id: str) -> None:
    """InputError unless ``run_id`` is a run of this file."""
    if not RunReads(store, run_id).exists():
        raise InputError(f"{store.path}: no run {run_id!r}")


def load_run(store: Store, run_id: str) -> RunData:
    """Item scores, canonical accuracy and replicate noise of ``run_id``."""
    check_run(store, run_id)
    reads = RunReads(store, run_id)
    data = RunData(run_id)
    examples: dict[str, str] = {}  # one string per example id, shared by every figure that reads it
    for row in reads.item_score_groups():
        key = (row["model_id"], row["dataset_id"], row["axis"], row["metric"], row["family"])
        ids = [examples.setdefault(e, e) for e in row["example_ids"]]
        data.items[key] = dict(zip(ids, map(float, row["values"]), strict=True))
    noise = _canonical_outputs(reads, data)
    for row in reads.replicate_distances():
        source = ("replicate_distance", row["model_id"], row["dataset_id"])
        noise.setdefault(source, {})[row["example_id"]] = float(row["value"])
    _replicate_noise(data, noise)
    _variant_counts(reads, data)
    data.model_names = reads.model_names()
    data.positions = [(r["model_id"], r["training_run"], r["step"]) for r in reads.checkpoint_positions()]
    data.dataset_names = reads.dataset_names()
    for row in reads.final_sequences():
        unit_metric = (row["model_id"], row["dataset_id"], row["metric"])
        data.sequences[unit_metric] = (float(row["lower"]), float(row["upper"]))
    for row in reads.final_comparisons():
        pair_metric = (row["dataset_id"], row["model_a"], row["model_b"], row["metric"])
        data.pair_sequences[pair_metric] = (float(row["lower"]), float(row["upper"]))
    return data


def _variant_counts(reads: RunReads, data: RunData) -> None:
    """How many variants each example's item scores are computed over, per family (``n_variants``); for
    family None, as many as the full design renders (a sampled design's drawn cells count 1 / inclusion
    times: its scores estimate the full design's)."""
    full: dict[tuple[str, str, str | None], float] = {}
    for row in reads.variant_counts():
        dataset, example, family = row["dataset_id"], row["example_id"], row["family"]
        if row["preserving"]:
            key = (dataset, example, None)
            full[key] = full.get(key, 0.0) + int(row["n"]) / float(row["inclusion"])
            data.n_variants[key] = round(full[key])
        if family != "canonical":
            data.n_variants[(dataset, example, family)] = int(row["n"]) + 1


NoiseFigures = dict[tuple[str, str, str], dict[str, float]]  # (source, model, dataset) -> example -> figure


def _replicate_noise(data: RunData, figures: NoiseFigures) -> None:
    """``data.replicate`` of every metric with a replicate null, from the noise source it declares
    (:class:`~sago_fast.axes.catalogue.ReplicateNoise`): one figure per example, scaled later
    (:func:`~sago_fast.stats.nulls.like_for_like`)."""
    declared = [(n, CATALOGUE.get(n).noise) for n in CATALOGUE.names()]
    for (source, model, dataset), by_example in figures.items():
        for name, noise in declared:
            if noise is not None and noise.source == source:
                data.replicate[(model, dataset, name)] = dict(by_example)


def _canonical_outputs(reads: RunReads, data: RunData) -> NoiseFigures:
    """Canonical accuracy per example, and the replicate pair's output noise figures (``p_gold_gap``,
    ``option_js``; :data:`~sago_fast.axes.catalogue.NOISE_SOURCES`)."""
    noise: NoiseFigures = {}
    runs: dict[tuple[str, str, str], dict[int, tuple]] = defaultdict(dict)
    for row in reads.canonical_outputs():
        where = (row["model_id"], row["dataset_id"], row["example_id"])
        runs[where][int(row["replicate"])] = (row["correct"], row["p_gold"], row["option_logprobs"])
    for (model, dataset, example), by_replicate in runs.items():
        if 0 not in by_replicate:
            continue
        correct, p_gold, option_logprobs = by_replicate[0]
        data.items.setdefault((model, dataset, *ACCURACY, None), {})[example] = float(bool(correct))
        data.canonical.setdefault((model, dataset), {})[example] = (float(p_gold or 0.0), bool(correct))
        if 1 not in by_replicate:
            continue
        _, p_gold_1, option_logprobs_1 = by_replicate[1]
        if p_gold is not None and p_gold_1 is not None:  # the gap; nulls.like_for_like scales it
            gap = abs(float(p_gold) - float(p_gold_1))
            noise.setdefault(("p_gold_gap", model, dataset), {})[example] = gap
        if option_logprobs is not None and option_logprobs_1 is not None:
            pair = np.exp(np.array([option_logprobs, option_logprobs_1], dtype=np.float64))  # (2, K)
            js = float(pairwise(pair, "js")[0])  # the kernel the confidence axis computes option_js with
            noise.setdefault(("option_js", model, dataset), {})[example] = js
    return noise
