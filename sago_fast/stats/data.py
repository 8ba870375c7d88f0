"""What the statistics read from a results file: per-example item scores and replicate noise of one run.

Everything is keyed by example so that resampling examples keeps each example's variants together.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sago_fast.axes.catalogue import CATALOGUE, headline_metrics
from sago_fast.axes.catalogue import axes as catalogue_axes
from sago_fast.axes.catalogue import metric as catalogue_metric
from sago_fast.errors import InputError
from sago_fast.kernels import pairwise_batched
from sago_fast.store import Store
from sago_fast.store.reads import RunReads, latest_finished_run, latest_running_run

# The score of each axis used where one number per axis is needed (rankings, correlations): the first
# metric present for the dataset. All are "higher = less stable".
HEADLINE: dict[str, tuple[str, ...]] = {axis: headline_metrics(axis) for axis in catalogue_axes()}
AXES = tuple(HEADLINE)
ACCURACY = ("accuracy", "accuracy")  # (axis, metric) of canonical correctness, higher = better

Key = tuple[str, str, str, str, str | None]  # (model_id, dataset_id, axis, metric, family)


@dataclass(frozen=True)
class Scores:
    """One figure's per-example values, as arrays: ``codes`` (n,) the examples' codes
    (:attr:`RunData.example_ids`), ascending and unique; ``values`` (n, ...) float64, row i that of
    example ``codes[i]``. A run of millions of scores holds no Python object per score."""

    codes: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.codes)

    def at(self, codes: np.ndarray) -> np.ndarray:
        """The values at ``codes`` (m,), NaN where this figure has no value: (m, ...) float64."""
        out = np.full((len(codes), *self.values.shape[1:]), np.nan)
        if len(self.codes) == 0:
            return out
        where = np.minimum(np.searchsorted(self.codes, codes), len(self.codes) - 1)
        hit = self.codes[where] == codes
        out[hit] = self.values[where[hit]]
        return out

    def on(self, codes: np.ndarray) -> np.ndarray:
        """The values at ``codes``, every one of which this figure has (a subset of :attr:`codes`)."""
        return self.values[np.searchsorted(self.codes, codes)]


EMPTY = Scores(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))


def shared_codes(*scores: Scores) -> np.ndarray:
    """The codes every one of ``scores`` has, ascending."""
    if not scores:
        return np.empty(0, dtype=np.int64)
    common = scores[0].codes
    for other in scores[1:]:
        common = np.intersect1d(common, other.codes, assume_unique=True)
    return common


@dataclass
class RunData:
    """One run's per-example values, as :class:`Scores` over example codes (``example_ids[code]``).

    ``items[key]``: the item scores of a figure; ``replicate[(model, dataset, metric)]``: the replicate
    pair's figure for the metric (the noise floor: the pair's distance or JS divergence, or the |gap| in
    P(gold) between the two runs of the canonical prompt); ``canonical[(model, dataset)]``: (n, 2) values,
    (p_gold, correct) of the canonical variant; ``n_variants[(dataset, family)]``: the variants an item
    score of that family is computed over (family None: every meaning-preserving variant; a family:
    canonical + its variants). :meth:`put` and its siblings fill them from ``{example_id: value}``."""

    run_id: str
    items: dict[Key, Scores] = field(default_factory=dict)
    replicate: dict[tuple[str, str, str], Scores] = field(default_factory=dict)
    canonical: dict[tuple[str, str], Scores] = field(default_factory=dict)
    n_variants: dict[tuple[str, str | None], Scores] = field(default_factory=dict)
    example_ids: list[str] = field(default_factory=list)
    model_names: dict[str, str] = field(default_factory=dict)
    dataset_names: dict[str, str] = field(default_factory=dict)
    positions: list[tuple[str, str, int]] = field(default_factory=list)  # (model, training run, step)
    # sequential units: (model, dataset, metric) -> (lower, upper) of the final confidence sequence
    sequences: dict[tuple[str, str, str], tuple[float, float]] = field(default_factory=dict)
    # --until-separated: (dataset, model_a, model_b, metric) -> the paired sequence of model_b - model_a
    pair_sequences: dict[tuple[str, str, str, str], tuple[float, float]] = field(default_factory=dict)
    _codes: dict[str, int] = field(default_factory=dict, repr=False)

    def codes_of(self, example_ids: Sequence[str]) -> np.ndarray:
        """The codes of ``example_ids`` (new ids get the next codes)."""
        codes = np.empty(len(example_ids), dtype=np.int64)
        for i, example in enumerate(example_ids):
            code = self._codes.get(example)
            if code is None:
                code = self._codes[example] = len(self.example_ids)
                self.example_ids.append(example)
            codes[i] = code
        return codes

    def scores(self, by_example: Mapping[str, Any]) -> Scores:
        """``{example_id: value}`` (a value: a number, or a tuple of numbers) as :class:`Scores`."""
        codes = self.codes_of(list(by_example))
        values = np.asarray(list(by_example.values()), dtype=np.float64)
        order = np.argsort(codes, kind="stable")
        return Scores(codes[order], values[order])

    def put(self, key: Key, by_example: Mapping[str, float]) -> None:
        self.items[key] = self.scores(by_example)

    def put_replicate(self, key: tuple[str, str, str], by_example: Mapping[str, float]) -> None:
        self.replicate[key] = self.scores(by_example)

    def put_canonical(self, key: tuple[str, str], by_example: Mapping[str, tuple[float, bool]]) -> None:
        self.canonical[key] = self.scores({e: (float(p), float(c)) for e, (p, c) in by_example.items()})

    def put_variant_counts(self, dataset: str, family: str | None, by_example: Mapping[str, int]) -> None:
        self.n_variants[(dataset, family)] = self.scores(by_example)

    def ids(self, codes: np.ndarray) -> list[str]:
        return [self.example_ids[int(c)] for c in codes]

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
    """Item scores, canonical accuracy and replicate noise of ``run_id``, read model by model into arrays."""
    check_run(store, run_id)
    reads = RunReads(store, run_id)
    data = RunData(run_id)
    data.codes_of(reads.example_ids())  # codes in example-id order: every figure's values in that order
    for model in reads.scored_models():
        _read_item_scores(reads, data, model)
        noise = _canonical_outputs(reads, data, model)
        distances = reads.replicate_distances(model)
        for dataset, scores in _by_dataset(data, distances, distances.column("value")):
            noise[("replicate_distance", model, dataset)] = scores
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


def _codes(data: RunData, example_ids: Any) -> np.ndarray:
    """The codes of an arrow array of example ids, every one of which the run's example list has."""
    import pyarrow as pa
    import pyarrow.compute as pc

    codes = pc.index_in(example_ids, value_set=pa.array(data.example_ids, type=pa.string()))
    if codes.null_count:
        raise InputError(f"results file: an example id read for {data.run_id!r} has no output in the run")
    return np.asarray(codes.to_numpy(zero_copy_only=False), dtype=np.int64)


def _sorted(codes: np.ndarray, values: np.ndarray) -> Scores:
    order = np.argsort(codes, kind="stable")
    return Scores(codes[order], values[order])


def _read_item_scores(reads: RunReads, data: RunData, model: str) -> None:
    table = reads.item_score_lists(model)
    ids, values = table.column("example_ids").combine_chunks(), table.column("values").combine_chunks()
    for i, (dataset, axis, metric, family) in enumerate(
        zip(*(table.column(c).to_pylist() for c in ("dataset_id", "axis", "metric", "family")), strict=True)
    ):
        codes = _codes(data, ids[i].values)
        data.items[(model, dataset, axis, metric, family)] = _sorted(
            codes, np.asarray(values[i].values.to_numpy(zero_copy_only=False), dtype=np.float64)
        )


def _by_dataset(data: RunData, table: Any, column: Any) -> list[tuple[str, Scores]]:
    """``column`` of a per-example arrow table (dataset_id, example_id, ...) as Scores per dataset (rows
    whose value is NULL left out)."""
    datasets = np.asarray(table.column("dataset_id").to_pylist(), dtype=object)
    values = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)
    codes = _codes(data, table.column("example_id"))
    out = []
    for dataset in sorted(set(datasets)):
        keep = (datasets == dataset) & np.isfinite(values)
        out.append((dataset, _sorted(codes[keep], values[keep])))
    return out


def _variant_counts(reads: RunReads, data: RunData) -> None:
    """How many variants each example's item scores are computed over, per family (``n_variants``); for
    family None, as many as the full design renders (a sampled design's drawn cells count 1 / inclusion
    times: its scores estimate the full design's)."""
    full: dict[tuple[str, str], float] = defaultdict(float)
    per_family: dict[tuple[str, str | None], dict[str, int]] = defaultdict(dict)
    for row in reads.variant_counts():
        dataset, example, family = row["dataset_id"], row["example_id"], row["family"]
        if row["preserving"]:
            full[(dataset, example)] += int(row["n"]) / float(row["inclusion"])
        if family != "canonical":
            per_family[(dataset, family)][example] = int(row["n"]) + 1
    for (dataset, example), n in full.items():
        per_family[(dataset, None)][example] = round(n)
    for (dataset, family), by_example in per_family.items():
        data.put_variant_counts(dataset, family, by_example)


NoiseFigures = dict[tuple[str, str, str], Scores]  # (source, model, dataset) -> the figure per example


def _replicate_noise(data: RunData, figures: NoiseFigures) -> None:
    """``data.replicate`` of every metric with a replicate null, from the noise source it declares
    (:class:`~sago_fast.axes.catalogue.ReplicateNoise`): one figure per example, scaled later
    (:func:`~sago_fast.stats.nulls.like_for_like`)."""
    declared = [(n, CATALOGUE.get(n).noise) for n in CATALOGUE.names()]
    for (source, model, dataset), scores in figures.items():
        for name, noise in declared:
            if noise is not None and noise.source == source:
                data.replicate[(model, dataset, name)] = scores


def _canonical_outputs(reads: RunReads, data: RunData, model: str) -> NoiseFigures:
    """One model's canonical accuracy per example, and the replicate pair's output noise figures
    (``p_gold_gap``, ``option_js``; :data:`~sago_fast.axes.catalogue.NOISE_SOURCES`)."""
    table = reads.canonical_runs(model)
    noise: NoiseFigures = {}
    correct = np.asarray(table.column("correct").to_pylist(), dtype=object)
    correct = np.array([bool(c) for c in correct], dtype=np.float64)
    p_gold = np.nan_to_num(
        np.asarray(table.column("p_gold").to_numpy(zero_copy_only=False), dtype=np.float64)
    )
    p_gold_1 = np.asarray(table.column("p_gold_1").to_numpy(zero_copy_only=False), dtype=np.float64)
    has_p = np.isfinite(np.asarray(table.column("p_gold").to_numpy(zero_copy_only=False), dtype=np.float64))
    gap = np.where(has_p & np.isfinite(p_gold_1), np.abs(p_gold - p_gold_1), np.nan)
    js = _replicate_js(
        table.column("option_logprobs").to_pylist(), table.column("option_logprobs_1").to_pylist()
    )
    codes = _codes(data, table.column("example_id"))
    datasets = np.asarray(table.column("dataset_id").to_pylist(), dtype=object)
    for dataset in sorted(set(datasets)):
        rows = datasets == dataset
        data.items[(model, dataset, *ACCURACY, None)] = _sorted(codes[rows], correct[rows])
        data.canonical[(model, dataset)] = _sorted(
            codes[rows], np.stack([p_gold[rows], correct[rows]], axis=1)
        )
        for source, figure in (("p_gold_gap", gap), ("option_js", js)):
            keep = rows & np.isfinite(figure)
            if keep.any():
                noise[(source, model, dataset)] = _sorted(codes[keep], figure[keep])
    return noise


def _replicate_js(main: list, replicate: list) -> np.ndarray:
    """Per example, the JS divergence between the option distributions of the canonical prompt's two runs
    (NaN where either has none), with the kernel the confidence axis computes option_js with; examples
    with the same number of options in one batched call."""
    out = np.full(len(main), np.nan)
    by_width: dict[int, list[int]] = defaultdict(list)
    for i, (a, b) in enumerate(zip(main, replicate, strict=True)):
        if a is not None and b is not None and len(a) == len(b):
            by_width[len(a)].append(i)
    for rows in by_width.values():
        pairs = np.exp(np.array([[main[i], replicate[i]] for i in rows], dtype=np.float64))  # (n, 2, K)
        out[rows] = pairwise_batched(pairs, "js")[:, 0]
    return out
