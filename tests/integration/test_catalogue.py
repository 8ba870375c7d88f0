"""Every metric a run writes is in the metric catalogue, and every catalogue entry for the task is written."""

from __future__ import annotations

import pytest

from sago_fast.axes.catalogue import CATALOGUE
from sago_fast.store import Store

TASK_OF = {"capitals": "multiple_choice", "comparison": "pairwise"}


def test_run_writes_exactly_the_catalogue_metrics(run_db):
    db, _ = run_db
    with Store(db, read_only=True) as store:
        written: dict[str, set[tuple[str, str]]] = {}
        for table in ("item_scores", "dataset_scores"):
            _, rows = store.query(f"SELECT DISTINCT dataset_id, axis, metric FROM {table}")
            for dataset, axis, metric in rows:
                spec = CATALOGUE.get(metric)  # an unknown metric fails here
                assert spec.axis == axis and table in spec.tables, (table, axis, metric)
                written.setdefault(dataset, set()).add((table, metric))
        _, rows = store.query("SELECT DISTINCT dataset_id, metric FROM layer_scores")
        for dataset, metric in rows:
            assert "layer_scores" in CATALOGUE.get(metric).tables, metric
            written.setdefault(dataset, set()).add(("layer_scores", metric))
    for dataset, task in TASK_OF.items():
        expected = {
            (table, spec.name)
            for spec in map(CATALOGUE.get, CATALOGUE.names())
            if task in spec.tasks
            for table in spec.tables
        }
        assert written[dataset] == expected, (dataset, expected ^ written[dataset])


def test_a_metric_at_each_level_is_one_declaration(tmp_path, checkpoints, cache_dir):
    """The README's "Adding a metric" recipe, at every level, from outside the package: a scorer whose
    decorator declares its metric (catalogue entry, replicate noise included) is all it takes for the metric
    to be computed, stored, tested against its null, shown in the summary and kept in the right axis."""
    import numpy as np

    from sago_fast.axes import DATASET_SCORERS, ITEM_SCORERS, LAYER_SCORERS, ItemScore, item_scorer
    from sago_fast.axes.catalogue import MetricSpec, ReplicateNoise
    from sago_fast.axes.levels import dataset_scorer, layer_scorer
    from sago_fast.axes.scored import DatasetScore, LayerScores, ScoredRows
    from sago_fast.run import RunConfig, run
    from sago_fast.store.queries import summary_rows

    @item_scorer(
        "toy_top_probability",
        "confidence",
        tasks=("multiple_choice",),
        metrics=[
            MetricSpec(
                "toy_top_spread",
                ("item_scores",),
                tasks=("multiple_choice",),
                unit="probability",
                null="tolerance",
                tolerance=0.01,
                headline=5,
            )
        ],
    )
    def toy(view):  # how much the top option's probability moves across variants
        top = view.outputs.option_probs.max(axis=1)
        return [ItemScore(view.outputs.example_id, "confidence", "toy_top_spread", None, float(np.ptp(top)))]

    @layer_scorer(
        "toy_norm_spread",
        "generation",  # an axis other than activation: its layer mean must be filed under it
        metrics=[
            MetricSpec(
                "toy_norm_spread",
                ("layer_scores", "item_scores"),
                unit="norm",
                null="replicate",
                sesoi=0.5,
                noise=ReplicateNoise("replicate_distance", "pair"),
            )
        ],
    )
    def toy_layers(block, context):  # spread of the hidden-state norms over each example's variants
        norms = np.linalg.norm(block.hidden, axis=-1)  # (L+1, E, V)
        return [
            LayerScores.grid(
                list(block.example_ids), block.pooling, "toy_norm_spread", None, np.ptp(norms, axis=2)
            )
        ]

    @dataset_scorer(
        "toy_answer_count", metrics=[MetricSpec("toy_answers", ("dataset_scores",), unit="variants")]
    )
    class ToyAnswers:
        axis = "mirroring"

        def partial(self, chunk):
            return {"n": np.array(len(chunk.correct))}

        def finish(self, partials, context):
            total = float(sum(int(p["n"]) for p in partials))
            return ScoredRows(datasets=[DatasetScore("mirroring", "toy_answers", None, None, None, total)])

    try:
        db = tmp_path / "r.duckdb"
        config = RunConfig(
            models=(str(checkpoints["llama"]),),
            datasets=("capitals",),
            db=db,
            limit=6,
            variants_per_family=1,
            cache_dir=cache_dir,
            chunk_memory_mb=0.05,  # several chunks: the dataset scorer's partials are combined
        )
        run(config, progress=False)
        with Store(db, read_only=True) as store:
            _, items = store.query(
                "SELECT axis, metric, count(*), min(value) FROM item_scores WHERE metric LIKE 'toy%' GROUP BY ALL ORDER BY ALL"
            )
            _, layers = store.query("SELECT count(*) FROM layer_scores WHERE metric = 'toy_norm_spread'")
            _, datasets = store.query("SELECT axis, value FROM dataset_scores WHERE metric = 'toy_answers'")
            _, variants = store.query("SELECT count(*) FROM outputs WHERE replicate = 0")
            _, chunks = store.query("SELECT count(*) FROM unit_chunks")
            _, scores = store.query(
                "SELECT metric, test, null_value, p_value FROM model_scores WHERE metric LIKE 'toy%' ORDER BY metric"
            )
            columns, rows = summary_rows(store, store.query("SELECT run_id FROM runs")[1][0][0])
        assert [(a, m, n) for a, m, n, _ in items] == [
            ("confidence", "toy_top_spread", 6),
            ("generation", "toy_norm_spread", 6),
        ]
        assert all(low >= 0.0 for *_, low in items) and layers[0][0] > 0
        assert chunks[0][0] > 1 and datasets == [("mirroring", float(variants[0][0]))]
        (norm_metric, norm_test, norm_null, _), (top_metric, top_test, top_null, top_p) = scores
        assert norm_metric == "toy_norm_spread" and "sesoi" in norm_test and norm_null >= 0.5
        assert (
            top_metric == "toy_top_spread" and top_null == 0.01 and "0.01" in top_test and 0.0 <= top_p <= 1.0
        )
        at = columns.index("toy_top_spread")  # after the confidence axis' other headline metrics
        assert columns[at - 1] == "p_gold_diff" and rows[0][at] is not None
    finally:
        ITEM_SCORERS.remove("toy_top_probability")
        LAYER_SCORERS.remove("toy_norm_spread")
        DATASET_SCORERS.remove("toy_answer_count")
        for name in ("toy_top_spread", "toy_norm_spread", "toy_answers"):
            CATALOGUE.remove(name)


def test_a_metric_missing_from_the_catalogue_fails_loudly():
    import pytest

    from sago_fast.axes import ItemScore
    from sago_fast.axes.catalogue import check_written

    with pytest.raises(ValueError, match="not in the metric catalogue"):
        check_written("confidence", [ItemScore("e1", "confidence", "unlisted_metric", None, 0.5)])
    with pytest.raises(ValueError, match="under that axis"):
        check_written("generation", [ItemScore("e1", "generation", "option_js", None, 0.5)])


def test_every_fixed_null_test_agrees_with_its_interval(run_db):
    """On a real run's model_scores: a test against a fixed null (tolerance, chance, SESOI) rejects at
    p < 0.025 exactly when the 95% CI lies wholly beyond the null (Clopper-Pearson inverts the one-sided
    binomial tests; the bootstrap-t CI and test share their resamples), and the effect is estimate - null in
    the direction of instability; continuous metrics of a deterministic CPU run are tested against their
    SESOI, not against float noise."""
    db, _ = run_db
    with Store(db, read_only=True) as store:
        _, rows = store.query(
            """SELECT metric, test, estimate, ci_low, ci_high, null_value, effect, p_value FROM model_scores
               WHERE p_value IS NOT NULL AND test NOT LIKE '%of differences%'"""
        )
    assert rows
    checked = 0
    for metric, test, estimate, low, high, null_value, effect, p in rows:
        less = CATALOGUE.get(metric).direction == "lower"
        beyond = high < null_value if less else low > null_value
        assert effect == pytest.approx(null_value - estimate if less else estimate - null_value, abs=1e-12)
        if CATALOGUE.get(metric).null == "replicate":
            assert "sesoi" in test, (metric, test)
        if abs(p - 0.025) > 0.004:  # away from the edge, where quantile interpolation decides
            assert beyond == (p < 0.025), (metric, test, low, high, null_value, p)
            checked += 1
    assert checked >= 10


def test_one_name_is_one_number_in_the_summary_the_statistics_and_the_report(run_db):
    """Every headline column of the run summary equals the ``model_scores`` estimate of that metric (the
    report's headline table reads model_scores too): dispersion is the mean over layers in all of them."""
    import pytest

    from sago_fast.axes.catalogue import headline_specs
    from sago_fast.report.contents import load_report_data
    from sago_fast.store import Store
    from sago_fast.store.queries import summary_rows

    db, result = run_db
    with Store(db, read_only=True) as store:
        columns, rows = summary_rows(store, result.run_id)
        _, scores = store.query(
            "SELECT n.model, s.dataset_id, s.metric, s.estimate FROM model_scores s JOIN model_names n "
            "USING (model_id) WHERE s.run_id = $run AND s.family IS NULL",
            {"run": result.run_id},
        )
        report = load_report_data(store, result.run_id).headline.rows
    estimate = {(m, d, metric): e for m, d, metric, e in scores}
    compared = 0
    for row in rows:
        for spec in headline_specs():
            value = row[columns.index(spec.name)]
            key = (row[0], row[1], spec.name)
            if value is None or key not in estimate or spec.family is not None:
                continue
            assert value == pytest.approx(estimate[key], abs=0.6 * 10**-spec.digits), key
            compared += 1
    assert compared >= 6 and any(spec.name == "dispersion" for spec in headline_specs())
    reported = [(r[0], r[4]) for r in report if r[3] == "dispersion"]
    assert reported
    for model, value in reported:  # the report's figure is one of that model's model_scores estimates
        assert any(
            value == pytest.approx(e)
            for (m, _, metric), e in estimate.items()
            if m == model and metric == "dispersion"
        )
