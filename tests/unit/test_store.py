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
