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


def test_a_new_metric_needs_its_axis_module_and_the_catalogue_only(tmp_path, checkpoints, cache_dir):
    """The README's "Adding a metric" recipe: a scorer registered by the axis and one catalogue entry are
    enough for the metric to be computed, stored, tested against its null and shown in the summary."""
    import numpy as np

    from sago_fast.axes import ItemScore, item_scorer
    from sago_fast.axes.catalogue import MetricSpec
    from sago_fast.axes.items import ITEM_SCORERS
    from sago_fast.run import RunConfig, run
    from sago_fast.store.queries import summary_rows

    @item_scorer("toy_top_probability", "confidence", tasks=("multiple_choice",))
    def toy(view):  # how much the top option's probability moves across variants
        top = view.outputs.option_probs.max(axis=1)
        return [ItemScore(view.outputs.example_id, "confidence", "toy_top_spread", None, float(np.ptp(top)))]

    CATALOGUE.add(
        "toy_top_spread",
        MetricSpec(
            "confidence",
            "toy_top_spread",
            ("item_scores",),
            tasks=("multiple_choice",),
            unit="probability",
            null="tolerance",
            tolerance=0.01,
            headline=5,
        ),
    )
    try:
        db = tmp_path / "r.duckdb"
        config = RunConfig(
            models=(str(checkpoints["llama"]),),
            datasets=("capitals",),
            db=db,
            limit=6,
            variants_per_family=1,
            cache_dir=cache_dir,
        )
        run(config, progress=False)
        with Store(db, read_only=True) as store:
            _, items = store.query(
                "SELECT count(*), min(value), max(value) FROM item_scores WHERE metric = 'toy_top_spread'"
            )
            _, scores = store.query(
                "SELECT test, null_value, p_value FROM model_scores WHERE metric = 'toy_top_spread'"
            )
            columns, rows = summary_rows(store, store.query("SELECT run_id FROM runs")[1][0][0])
        assert items[0][0] == 6 and 0.0 <= items[0][1] <= items[0][2] <= 1.0
        ((test, null_value, p_value),) = scores
        assert null_value == 0.01 and "0.01" in test and 0.0 <= p_value <= 1.0
        at = columns.index("toy_top_spread")  # after the confidence axis' other headline metrics
        assert columns[at - 1] == "p_gold_sd" and rows[0][at] is not None
    finally:
        ITEM_SCORERS.remove("toy_top_probability")
        CATALOGUE.remove("toy_top_spread")


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
    from sago_fast.report.data import load_report_data
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
