from __future__ import annotations

import duckdb
import numpy as np
import pytest

from sago_fast.errors import StoreError
from sago_fast.store import SCHEMA_VERSION, Store
from sago_fast.store.migrations import MIGRATIONS

SPEC_TABLES = {
    "runs",
    "models",
    "datasets",
    "examples",
    "variants",
    "outputs",
    "layer_scores",
    "item_scores",
    "model_scores",
}


def test_fresh_store_has_spec_tables_and_version():
    with Store() as store:
        assert SPEC_TABLES <= set(store.tables())
        assert store.schema_version() == SCHEMA_VERSION == MIGRATIONS[-1].version


def test_insert_is_set_based_and_checks_names():
    with Store() as store:
        n = store.insert(
            "item_scores",
            {
                "run_id": ["r"] * 3,
                "model_id": ["m"] * 3,
                "dataset_id": ["d"] * 3,
                "example_id": ["a", "b", "c"],
                "axis": ["generation"] * 3,
                "metric": ["flip_rate"] * 3,
                "value": np.array([0.0, 0.5, 1.0]),
            },
        )
        assert n == 3
        cols, rows = store.query(
            "SELECT example_id FROM item_scores WHERE value >= $v ORDER BY 1", {"v": 0.5}
        )
        assert cols == ["example_id"] and rows == [("b",), ("c",)]
        with pytest.raises(StoreError, match="no column"):
            store.insert("item_scores", {"bogus; DROP TABLE runs": [1]})
        with pytest.raises(StoreError, match="unknown table"):
            store.insert("nope", {"a": [1]})


def test_transaction_rolls_back():
    with Store() as store:
        with pytest.raises(RuntimeError), store.transaction():
            store.insert("datasets", {"dataset_id": ["x"]})
            raise RuntimeError("crash")
        assert store.query("SELECT count(*) FROM datasets")[1] == [(0,)]


def test_reopen_file_keeps_rows_and_version(tmp_path):
    path = tmp_path / "r.duckdb"
    with Store(path) as store:
        store.insert("datasets", {"dataset_id": ["x"], "name": ["x"]})
    with Store(path, read_only=True) as store:
        assert store.query("SELECT name FROM datasets")[1] == [("x",)]
        assert store.query("SELECT count(*) FROM schema_version")[1] == [(SCHEMA_VERSION,)]


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "new.duckdb"
    Store(path).close()
    con = duckdb.connect(str(path))
    con.execute("INSERT INTO schema_version VALUES (999, 'future', now())")
    con.close()
    with pytest.raises(StoreError, match="newer than this sago_fast"):
        Store(path)


def test_missing_and_bad_files(tmp_path):
    with pytest.raises(StoreError, match="no such database"):
        Store(tmp_path / "missing.duckdb", read_only=True)
    bad = tmp_path / "bad.duckdb"
    bad.write_text("not a database")
    with pytest.raises(StoreError):
        Store(bad)


def test_sql_error_is_one_line():
    with Store() as store, pytest.raises(StoreError, match="SQL error"):
        store.query("SELEC 1")


def test_keyed_insert_is_idempotent():
    with Store() as store:
        rows = {"dataset_id": ["a", "b"], "name": ["A", "B"]}
        store.insert("datasets", rows, key=("dataset_id",))
        store.insert("datasets", {"dataset_id": ["b", "c"], "name": ["B", "C"]}, key=("dataset_id",))
        assert store.query("SELECT dataset_id FROM datasets ORDER BY 1")[1] == [("a",), ("b",), ("c",)]
        with pytest.raises(StoreError, match="no column"):
            store.insert("datasets", {"name": ["x"]}, key=("dataset_id",))


def test_run_lifecycle_methods():
    """done units, statistics present, and the run's status: the questions sinks, merge, the pipeline and
    the report ask, answered in one place."""
    from datetime import datetime

    from sago_fast.runinfo import run_row

    store = Store()
    store.insert("runs", run_row("r1", "run", {}, "cpu", "", "running"), key=("run_id",))
    assert store.done_units("r1") == set() and not store.has_stats("r1")
    units = {
        "run_id": ["r1", "r1", "r1"],
        "unit_id": ["u1", "u2", "u3"],
        "model_id": ["m"] * 3,
        "dataset_id": ["d"] * 3,
        "shard": [0, 0, 0],
        "checkpoint": ["c"] * 3,
        "status": ["done", "done", "failed"],
        "n_examples": [1, 1, 1],
        "n_variants": [1, 1, 1],
        "accuracy": [1.0, 1.0, 1.0],
        "seconds": [1.0, 1.0, 1.0],
        "provider": ["CPUExecutionProvider", "CPUExecutionProvider", ""],
        "finished_at": [datetime(2026, 1, 1)] * 3,
    }
    store.insert("units", units)
    assert store.done_units("r1") == {"u1", "u2"} and store.unit_done("r1", "u1")
    assert not store.unit_done("r1", "u3") and not store.unit_done("r2", "u1")
    store.set_run_status("r1", "done", "")  # empty provider keeps the recorded one
    assert store.query("SELECT status, provider FROM runs")[1] == [("done", "")]
    store.set_run_status("r1", "partial", provider="units")
    assert store.query("SELECT status, provider FROM runs")[1] == [("partial", "CPUExecutionProvider")]
    store.set_run_status("r1", "done", "CUDAExecutionProvider")
    assert store.query("SELECT provider FROM runs")[1] == [("CUDAExecutionProvider",)]
