"""Every metric a run writes is in the metric catalogue, and every catalogue entry for the task is written."""

from __future__ import annotations

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
