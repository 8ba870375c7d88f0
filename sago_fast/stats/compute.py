"""Every statistic of one run, as table columns ready for the store.

model_scores       per (model, dataset, axis, metric, family): mean over examples, its CI and a one-sided
                   test of the mean against the metric's null (nulls.py; exact binomial for 0/1 values,
                   else studentized bootstrap over examples), the effect (estimate beyond the null, in the
                   metric's unit), BH-adjusted p over the whole table
model_comparisons  per dataset and headline metric, every model pair on the same examples: one paired test
                   of the mean difference for every metric (differences rounded to 1e-12 relative):
                   significant when a sign-flip permutation test and a studentized bootstrap both
                   reject, the CI the hull of their inverted intervals (methods.paired_mean_difference);
                   McNemar on flip indicators
rankings           per source (a dataset, or one family of a dataset) and headline metric: each model's
                   mean rank over examples (1 = most stable / most accurate), Friedman test, Nemenyi CD;
                   plus ``worst_axis``: per model the worst of its four axis ranks
ranking_agreement  Kendall tau_b between the model rankings two sources induce (bootstrap CI over
                   examples), and Kendall's W over all datasets
rank_reversals     model pairs ordered significantly one way on one dataset and the other way on another:
                   significance and direction both from the mean difference that was tested
axis_correlations  per model and dataset, Spearman between the four headline axes across examples,
                   partial Spearman controlling for canonical P(gold) and correctness, permutation p-values
checkpoint_changes per training run, dataset and headline metric: each checkpoint against the previous
                   step's (the model_comparisons test, later minus earlier), BH over these comparisons
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from sago_fast.axes.catalogue import metric as catalogue_metric
from sago_fast.kernels.resampling import bootstrap_means, stream_key
from sago_fast.stats.changes import checkpoint_changes, training_runs
from sago_fast.stats.confidence_sequences import SEPARATION_TEST
from sago_fast.stats.data import ACCURACY, AXES, EMPTY, Key, RunData, shared_codes
from sago_fast.stats.design_advice import design_advice
from sago_fast.stats.methods import (
    PAIRED_TEST,
    StatsConfig,
    bh_adjust,
    comparison_significant,
    correlation_permutation_p,
    kendall_tau_b_rows,
    kendall_w,
    mcnemar_p,
    mean_inference,
    nemenyi_cd,
    paired_mean_difference,
    partial_spearman,
    pearson,
)
from sago_fast.stats.nulls import like_for_like, null_for
from sago_fast.stats.settings import sesoi_for

Columns = dict[str, list[Any]]

PAIRED_MEAN_TEST = PAIRED_TEST  # model_comparisons.test of every paired metric


@dataclass
class StatsTables:
    model_scores: Columns = field(default_factory=lambda: defaultdict(list))
    model_comparisons: Columns = field(default_factory=lambda: defaultdict(list))
    rankings: Columns = field(default_factory=lambda: defaultdict(list))
    ranking_agreement: Columns = field(default_factory=lambda: defaultdict(list))
    rank_reversals: Columns = field(default_factory=lambda: defaultdict(list))
    axis_correlations: Columns = field(default_factory=lambda: defaultdict(list))
    checkpoint_changes: Columns = field(default_factory=lambda: defaultdict(list))
    design_advice: Columns = field(default_factory=lambda: defaultdict(list))

    TABLES = (
        "model_scores",
        "model_comparisons",
        "rankings",
        "ranking_agreement",
        "rank_reversals",
        "axis_correlations",
        "checkpoint_changes",
        "design_advice",
    )


def _stream(*parts: object) -> int:
    """A stable random-stream id per figure, so results do not depend on the order figures are computed."""
    return zlib.crc32("\x1f".join(str(p) for p in parts).encode())


def _append(columns: Columns, **row: Any) -> None:
    """One row; NaN becomes NULL (SQL aggregates skip NULL, while one NaN poisons them)."""
    for name, value in row.items():
        if isinstance(value, float) and math.isnan(value):
            value = None
        columns[name].append(value)


def compute_stats(data: RunData, config: StatsConfig = StatsConfig()) -> StatsTables:
    tables = StatsTables()
    _model_scores(data, config, tables.model_scores)
    _comparisons(data, config, tables.model_comparisons)
    _rankings(data, config, tables)
    _reversals(data, config, tables)
    _correlations(data, config, tables.axis_correlations)
    tables.checkpoint_changes.update(_changes(data, config, tables.model_comparisons))
    design_advice(data, _headline_metrics, tables.design_advice)
    return tables


def changes_over_training(data: RunData, config: StatsConfig = StatsConfig()) -> Columns:
    """``checkpoint_changes`` alone, from the model comparisons it reads, as :func:`compute_stats` makes it."""
    comparisons: Columns = defaultdict(list)
    _comparisons(data, config, comparisons)
    return _changes(data, config, comparisons)


def _changes(data: RunData, config: StatsConfig, comparisons: Columns) -> Columns:
    return checkpoint_changes(
        data.run_id,
        training_runs(data.positions),
        {dataset: _headline_metrics(data, dataset) for dataset in data.datasets},
        comparisons,
        config.alpha,
    )


# --- model_scores -------------------------------------------------------------------------------------
SEQUENCE_TEST = "anytime-valid confidence sequence (sequential unit)"


def _model_scores(data: RunData, config: StatsConfig, out: Columns) -> None:
    for key in sorted(data.items, key=lambda k: tuple("" if x is None else x for x in k)):
        _append(out, **score_metric(data, key, config))
    _adjust(out, "p_value")


def score_metric(data: RunData, key: Key, config: StatsConfig) -> dict[str, Any]:
    """One ``model_scores`` row (without ``p_adjusted``): the mean of one item metric over examples, its
    CI, the test of the mean against the metric's null and the effect beyond that null."""
    model, dataset, axis, metric, family = key
    scores = data.items[key]
    values = scores.values
    null = _null(data, key, scores.codes, values, config)
    stream = _stream(*key)
    reference = None if null is None else null.reference  # None: estimate and CI, or a paired test below
    alternative = "greater" if null is None else null.alternative
    result = mean_inference(values, config, reference=reference, alternative=alternative, stream=stream)
    p, test, effect = result.p_value, "none", None
    low, high = result.low, result.high
    if null is not None:
        if null.tested is None:  # the values themselves against a fixed reference
            test = f"{result.method}: {null.label}"
        else:  # paired: (value - that example's null) against 0
            paired = mean_inference(
                null.tested, config, reference=0.0, alternative=alternative, stream=stream
            )
            p, test = paired.p_value, f"{paired.method} of differences: {null.label}"
            # the CI of what was tested, on the metric's scale: the differences' CI plus the null level,
            # so that it lies beyond null_value exactly when p says so (never a row against itself)
            low, high = paired.low + null.value, paired.high + null.value
        gap = result.estimate - null.value
        effect = gap if null.alternative == "greater" else -gap
    sequence = data.sequences.get((model, dataset, metric))
    if sequence is not None and family == catalogue_metric(metric).family:
        # a sequential unit stopped on these very values: a fixed-n CI and p-value would not hold, the
        # anytime-valid confidence sequence does (it is the CI; no p-value)
        low, high = sequence
        p, test = None, SEQUENCE_TEST
    return {
        "run_id": data.run_id,
        "model_id": model,
        "dataset_id": dataset,
        "axis": axis,
        "metric": metric,
        "family": family,
        "estimate": result.estimate,
        "ci_low": low,
        "ci_high": high,
        "p_value": p,
        "p_adjusted": None,
        "n_items": len(values),
        "test": test,
        "null_value": None if null is None else null.value,
        "effect": effect,
    }


def _adjust(out: Columns, column: str) -> None:
    """``p_adjusted``: Benjamini–Hochberg over every p-value of ``column`` in the table (NULL stays NULL)."""
    p = np.array([np.nan if v is None else v for v in out[column]], dtype=np.float64)
    out["p_adjusted"] = [None if np.isnan(x) else float(x) for x in bh_adjust(p)]


@dataclass(frozen=True)
class Null:
    """What one metric's mean is tested against.

    value: the null's mean (``model_scores.null_value``); reference: the fixed value the mean is tested
    against, or ``tested``: per-example differences (value - that example's null) tested against 0;
    label: which null, in words (``model_scores.test``)."""

    label: str
    value: float
    alternative: str
    reference: float | None = None
    tested: np.ndarray | None = None


def _null(
    data: RunData, key: tuple, codes: np.ndarray, values: np.ndarray, config: StatsConfig
) -> Null | None:
    """The null of one item metric (nulls.py), or None: estimate and CI only; ``codes``: the examples of
    ``values``."""
    model, dataset, _axis, metric, family = key
    spec = null_for(metric)
    alternative = spec.alternative
    if spec.kind == "replicate":
        sesoi = sesoi_for(config, metric, spec.sesoi)
        pairs = data.replicate.get((model, dataset, metric), EMPTY).at(codes)
        counts = data.n_variants.get((dataset, family), EMPTY).at(codes)
        counts = np.where(np.isfinite(counts), counts, 2).astype(np.int64)
        # like_for_like is linear in the replicate figure: one scale per number of variants
        sizes, which = np.unique(counts, return_inverse=True)
        noise = pairs * np.array([like_for_like(metric, 1.0, int(n)) for n in sizes])[which]
        seen = np.isfinite(noise)
        level = float(noise[seen].mean()) if seen.any() else float("nan")
        if seen.any() and level > sesoi:
            return Null(
                f"mean - replicate noise > 0 (noise {level:.3g} > sesoi {sesoi:g})",
                level,
                alternative,
                tested=values[seen] - noise[seen],
            )
        shown = "no replicate" if not seen.any() else f"replicate noise {level:.3g}"
        return Null(f"mean vs sesoi {sesoi:g} ({shown})", sesoi, alternative, reference=sesoi)
    if spec.kind == "tolerance":
        tol = config.tolerance if spec.tolerance is None else spec.tolerance
        reference = 1.0 - tol if alternative == "less" else tol
        return Null(f"mean vs tolerance {reference:g}", reference, alternative, reference=reference)
    if spec.kind == "chance":
        chance = data.items.get((model, dataset, "mirroring", "position_chance", family), EMPTY)
        levels = chance.at(codes)
        seen = np.isfinite(levels)
        if not seen.any():
            return None
        level = float(levels[seen].mean())
        if np.ptp(levels[seen]) == 0:
            return Null(f"mean vs chance {level:.3g}", level, alternative, reference=level)
        return Null(
            f"mean - chance > 0 (chance {level:.3g} on average)",
            level,
            alternative,
            tested=values[seen] - levels[seen],
        )
    return None


# --- model vs model -----------------------------------------------------------------------------------


def _headline_metrics(data: RunData, dataset: str) -> list[tuple[str, str, str | None]]:
    """(axis, metric, family) of accuracy and each axis' headline score on this dataset."""
    out = []
    for axis in (ACCURACY[0], *AXES):
        chosen = data.headline(dataset, axis)
        if chosen is not None:
            out.append((axis, *chosen))
    return out


def _paired(data: RunData, a: tuple, b: tuple) -> tuple[np.ndarray, np.ndarray]:
    va, vb = data.items.get(a, EMPTY), data.items.get(b, EMPTY)
    common = shared_codes(va, vb)
    return va.on(common), vb.on(common)


def _pair_sequence(
    data: RunData, dataset: str, model_a: str, model_b: str, metric: str, family: str | None
) -> tuple[float, float] | None:
    """The paired confidence sequence of model_a - model_b (``model_comparisons``' direction) when the
    two were compared with ``--until-separated`` on this metric (at the family the catalogue reads it at):
    a fixed-n CI and p-value would not hold for units that stopped on these differences."""
    if family != catalogue_metric(metric).family:
        return None
    stored = data.pair_sequences.get((dataset, model_b, model_a, metric))  # stored as its b - a: a - b here
    if stored is not None:
        return stored
    stored = data.pair_sequences.get((dataset, model_a, model_b, metric))
    return None if stored is None else (-stored[1], -stored[0])


ALL_PAIRS_MAX_MODELS = 12  # up to this many models every pair is compared (66 pairs); above, see below


def compared_pairs(data: RunData, config: StatsConfig) -> list[tuple[str, str]]:
    """The model pairs ``model_comparisons`` tests, each (a, b) with a < b: every pair up to
    ``ALL_PAIRS_MAX_MODELS`` models or with ``config.all_pairs``; above, a training run's consecutive
    checkpoints (what ``checkpoint_changes`` reads), and every pair among the models outside training runs
    and each training run's last checkpoint (100 checkpoints: 99 pairs, not 4,950)."""
    models = data.models
    if config.all_pairs or len(models) <= ALL_PAIRS_MAX_MODELS:
        return list(itertools.combinations(models, 2))
    present = set(models)
    chosen: set[tuple[str, str]] = set()
    in_runs: set[str] = set()
    last: list[str] = []
    for steps in training_runs(data.positions).values():
        ordered = [model for _, model in steps if model in present]
        in_runs.update(ordered)
        chosen.update((min(a, b), max(a, b)) for a, b in itertools.pairwise(ordered))
        last += ordered[-1:]
    representatives = sorted({*last, *(m for m in models if m not in in_runs)})
    chosen.update(itertools.combinations(representatives, 2))
    return sorted(chosen)


def _comparisons(data: RunData, config: StatsConfig, out: Columns) -> None:
    for dataset in data.datasets:
        metrics = _headline_metrics(data, dataset)
        flip = ("generation", "flip_rate", None)
        for model_a, model_b in compared_pairs(data, config):
            for axis, metric, family in metrics:
                a, b = _paired(
                    data, (model_a, dataset, axis, metric, family), (model_b, dataset, axis, metric, family)
                )
                if len(a) == 0:
                    continue
                stream = _stream(dataset, metric, model_a, model_b)
                p: float | None
                # every metric, 0/1 accuracy included (McNemar's test, then): one sign-flip test, its CI
                # the shifts that test does not reject
                paired = paired_mean_difference(a, b, config, stream=stream)
                low, high, p, test = paired.low, paired.high, paired.p_value, PAIRED_MEAN_TEST
                sequence = _pair_sequence(data, dataset, model_a, model_b, metric, family)
                if sequence is not None:  # the units stopped on these very differences
                    (low, high), p, test = sequence, None, SEPARATION_TEST
                _append(
                    out,
                    run_id=data.run_id,
                    dataset_id=dataset,
                    axis=axis,
                    metric=metric,
                    model_a=model_a,
                    model_b=model_b,
                    test=test,
                    mean_a=float(a.mean()),
                    mean_b=float(b.mean()),
                    difference=float((a - b).mean()),
                    ci_low=low,
                    ci_high=high,
                    p_value=p,
                    n_items=len(a),
                )
            a, b = _paired(data, (model_a, dataset, *flip), (model_b, dataset, *flip))
            if len(a):
                _append(
                    out,
                    run_id=data.run_id,
                    dataset_id=dataset,
                    axis="generation",
                    metric="any_flip",
                    model_a=model_a,
                    model_b=model_b,
                    test="mcnemar",
                    mean_a=float((a > 0).mean()),
                    mean_b=float((b > 0).mean()),
                    difference=float((a > 0).mean() - (b > 0).mean()),
                    ci_low=None,
                    ci_high=None,
                    p_value=mcnemar_p(a > 0, b > 0),
                    n_items=len(a),
                )
    _adjust(out, "p_value")


# --- rankings, agreement, reversals -----------------------------------------------------------------


def _matrix(
    data: RunData, dataset: str, axis: str, metric: str, family: str | None
) -> tuple[np.ndarray, np.ndarray]:
    """(example codes, (n_examples, n_models) values) over the examples every model has."""
    per_model = [data.items.get((m, dataset, axis, metric, family), EMPTY) for m in data.models]
    if not per_model:
        return EMPTY.codes, np.empty((0, 0))
    common = shared_codes(*per_model)
    return common, np.stack([v.on(common) for v in per_model], axis=1).reshape(len(common), len(per_model))


def _ranks(matrix: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """Ranks within each example (row), 1 = best, ties averaged."""
    return stats.rankdata(-matrix if higher_is_better else matrix, axis=1)


def _sources(
    data: RunData, dataset: str, axis: str, metric: str, family: str | None
) -> list[tuple[str, str | None]]:
    """The dataset itself, and for the generation axis each of its families (rankings a family induces)."""
    sources: list[tuple[str, str | None]] = [(dataset, family)]
    if axis == "generation" and family is None:
        families = sorted(
            {k[4] for k in data.items if k[1] == dataset and k[3] == metric and k[4] is not None}
        )
        sources += [(dataset, f) for f in families]
    return sources


def _source_name(data: RunData, dataset: str, family: str | None, headline_family: str | None) -> str:
    name = data.dataset_names.get(dataset, dataset)
    return name if family == headline_family else f"{name}/{family}"


def _rankings(data: RunData, config: StatsConfig, tables: StatsTables) -> None:
    models = data.models
    worst: dict[tuple[str, str], list[float]] = defaultdict(list)  # (dataset, model) -> axis ranks
    matrices: dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]] = {}  # (axis, metric, source)
    for dataset in data.datasets:
        for axis, metric, family in _headline_metrics(data, dataset):
            for _, fam in _sources(data, dataset, axis, metric, family):
                examples, matrix = _matrix(data, dataset, axis, metric, fam)
                if len(examples) == 0:
                    continue
                source = _source_name(data, dataset, fam, family)
                matrices[(axis, metric, source)] = (examples, matrix)
                ranks = _ranks(matrix, higher_is_better=axis == ACCURACY[0])
                mean_rank = ranks.mean(axis=0)
                order = stats.rankdata(mean_rank)
                fstat, fp = (float("nan"), float("nan"))
                if len(models) >= 3 and len(examples) >= 2 and (np.ptp(matrix, axis=1) > 0).any():
                    result = stats.friedmanchisquare(*matrix.T)
                    fstat, fp = float(result.statistic), float(result.pvalue)
                cd = nemenyi_cd(len(models), len(examples), config.alpha)
                for j, model in enumerate(models):
                    _append(
                        tables.rankings,
                        run_id=data.run_id,
                        source=source,
                        dataset_id=dataset,
                        family=fam,
                        axis=axis,
                        metric=metric,
                        model_id=model,
                        estimate=float(matrix[:, j].mean()),
                        mean_rank=float(mean_rank[j]),
                        rank=float(order[j]),
                        friedman_stat=fstat,
                        friedman_p=fp,
                        nemenyi_cd=cd,
                        n_items=len(examples),
                    )
                    if fam == family and axis != ACCURACY[0]:
                        worst[(dataset, model)].append(float(order[j]))
    for (dataset, model), axis_ranks in sorted(worst.items()):
        _append(
            tables.rankings,
            run_id=data.run_id,
            source=data.dataset_names.get(dataset, dataset),
            dataset_id=dataset,
            family=None,
            axis="worst_axis",
            metric="worst_axis_rank",
            model_id=model,
            estimate=max(axis_ranks),
            mean_rank=None,
            rank=max(axis_ranks),
            friedman_stat=None,
            friedman_p=None,
            nemenyi_cd=None,
            n_items=None,
        )
    _agreement(data, config, matrices, tables.ranking_agreement)


def _agreement(
    data: RunData,
    config: StatsConfig,
    matrices: dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]],
    out: Columns,
) -> None:
    n_models = len(data.models)
    if n_models < 2:
        return
    by_metric: dict[tuple[str, str], list[str]] = defaultdict(list)
    for axis, metric, source in matrices:
        by_metric[(axis, metric)].append(source)
    for (axis, metric), sources in sorted(by_metric.items()):
        for source_a, source_b in itertools.combinations(sorted(sources), 2):
            # whole datasets with each other; a dataset's families with each other and with it
            if source_a.split("/")[0] != source_b.split("/")[0] and ("/" in source_a or "/" in source_b):
                continue
            ma, mb = matrices[(axis, metric, source_a)][1], matrices[(axis, metric, source_b)][1]
            tau, p = stats.kendalltau(ma.mean(axis=0), mb.mean(axis=0))
            stream = _stream(axis, metric, source_a, source_b)
            # item-clustered bootstrap: resample each source's examples, recompute the model means
            ra = bootstrap_means(ma, config.n_resamples, stream_key(config.seed, stream, 0))  # (B, n_models)
            rb = bootstrap_means(mb, config.n_resamples, stream_key(config.seed, stream, 1))
            draws = kendall_tau_b_rows(ra, rb)
            draws = draws[np.isfinite(draws)]
            level = (1 - config.confidence) / 2
            low, high = (
                (float(np.quantile(draws, level)), float(np.quantile(draws, 1 - level)))
                if len(draws)
                else (None, None)
            )
            _append(
                out,
                run_id=data.run_id,
                axis=axis,
                metric=metric,
                statistic="kendall_tau_b",
                source_a=source_a,
                source_b=source_b,
                value=float(tau),
                ci_low=low,
                ci_high=high,
                p_value=float(p),
                n_models=n_models,
            )
        whole = [s for s in sources if "/" not in s]
        if len(whole) >= 2:
            higher = axis == ACCURACY[0]
            ranks = np.array(
                [
                    stats.rankdata(-m if higher else m)
                    for m in (matrices[(axis, metric, s)][1].mean(axis=0) for s in whole)
                ]
            )
            w, p = kendall_w(ranks)
            _append(
                out,
                run_id=data.run_id,
                axis=axis,
                metric=metric,
                statistic="kendall_w",
                source_a=None,
                source_b=None,
                value=w,
                ci_low=None,
                ci_high=None,
                p_value=p,
                n_models=n_models,
            )


def _reversals(data: RunData, config: StatsConfig, tables: StatsTables) -> None:
    """Model pairs whose order on a headline metric is significant (BH-adjusted) in opposite directions on
    two datasets. Significance and direction come from one statistic: the mean difference, whose test
    (:func:`paired_mean_difference`; a sequential comparison's anytime-valid sequence) rejects only when
    the difference's CI excludes 0 on the same side as its sign (:func:`comparison_significant`)."""
    comparisons = tables.model_comparisons
    significant: dict[tuple[str, str, str, str], dict[str, tuple[float, float]]] = defaultdict(dict)
    for i in range(len(comparisons["run_id"])):
        if comparisons["metric"][i] == "any_flip":  # a flip indicator, not a headline score
            continue
        p_adj = comparisons["p_adjusted"][i]
        sequential = comparisons["test"][i] == SEPARATION_TEST
        low, high = comparisons["ci_low"][i], comparisons["ci_high"][i]
        if not comparison_significant(sequential, p_adj, low, high, config.alpha):
            continue
        key = (
            comparisons["axis"][i],
            comparisons["metric"][i],
            comparisons["model_a"][i],
            comparisons["model_b"][i],
        )
        significant[key][comparisons["dataset_id"][i]] = (comparisons["difference"][i], p_adj)
    for (axis, metric, model_a, model_b), by_dataset in sorted(significant.items()):
        for dataset_a, dataset_b in itertools.combinations(sorted(by_dataset), 2):
            (diff_a, p_a), (diff_b, p_b) = by_dataset[dataset_a], by_dataset[dataset_b]
            if np.sign(diff_a) * np.sign(diff_b) < 0:
                _append(
                    tables.rank_reversals,
                    run_id=data.run_id,
                    axis=axis,
                    metric=metric,
                    model_a=model_a,
                    model_b=model_b,
                    dataset_a=dataset_a,
                    dataset_b=dataset_b,
                    difference_a=diff_a,
                    difference_b=diff_b,
                    p_adjusted_a=p_a,
                    p_adjusted_b=p_b,
                )


# --- axis independence --------------------------------------------------------------------------------


def _correlations(data: RunData, config: StatsConfig, out: Columns) -> None:
    headlines = {d: [h for h in _headline_metrics(data, d) if h[0] != ACCURACY[0]] for d in data.datasets}
    for model in data.models:
        for dataset in data.datasets:
            headline = headlines[dataset]
            canonical = data.canonical.get((model, dataset), EMPTY)
            series = {h: data.items.get((model, dataset, *h), EMPTY) for h in headline}
            for ha, hb in itertools.combinations(headline, 2):
                common = shared_codes(series[ha], series[hb], canonical)
                if len(common) < 4:
                    continue
                x, y = series[ha].on(common), series[hb].on(common)
                covariates = canonical.on(common)  # (n, 2) p_gold, correct
                covariates = covariates[:, np.ptp(covariates, axis=0) > 0]
                rx, ry = stats.rankdata(x), stats.rankdata(y)
                res_x, res_y = partial_spearman(x, y, covariates)
                stream = _stream(model, dataset, ha, hb)
                _append(
                    out,
                    run_id=data.run_id,
                    model_id=model,
                    dataset_id=dataset,
                    axis_a=ha[0],
                    metric_a=ha[1],
                    axis_b=hb[0],
                    metric_b=hb[1],
                    spearman=pearson(rx, ry),
                    spearman_p=correlation_permutation_p(rx, ry, config, stream=stream),
                    partial=pearson(res_x, res_y),
                    partial_p=correlation_permutation_p(res_x, res_y, config, stream=stream + 1),
                    n_items=len(common),
                )
    _adjust(out, "partial_p")
