from __future__ import annotations

from datetime import datetime

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


def chunk_rows(chunk, ids, state):
    from sago_fast.units.rows import ChunkDone, UnitKey, chunk_columns

    return {
        "item_scores": {
            "run_id": ["r"] * len(ids),
            "model_id": ["m"] * len(ids),
            "dataset_id": ["d"] * len(ids),
            "example_id": ids,
            "axis": ["generation"] * len(ids),
            "metric": ["flip_rate"] * len(ids),
            "family": [None] * len(ids),
            "value": [0.5] * len(ids),
        },
        "unit_chunks": chunk_columns(
            UnitKey("r", "u", "m", "d"), ChunkDone(chunk, ids, 2 * len(ids), 1, 0.25, state)
        ),
    }


@pytest.mark.parametrize("sink_kind", ["duckdb", "parquet"])
def test_chunks_commit_once_resume_and_finish(tmp_path, sink_kind):
    """Both sinks: a chunk is written once, what is committed is read back in order for a resume, and
    finishing the unit keeps the chunk records but drops their partial state."""
    from sago_fast.run.claims import PlannedUnit
    from sago_fast.run.merge import merge_shards
    from sago_fast.run.sinks import DuckDBSink, ParquetShardSink
    from sago_fast.units.rows import UnitDone, UnitKey, unit_columns

    run_row = {"run_id": ["r"], "created_at": [datetime(2026, 1, 1)], "status": ["running"]}
    if sink_kind == "duckdb":
        sink = DuckDBSink(tmp_path / "r.duckdb", run_row)
    else:
        sink = ParquetShardSink(tmp_path / "shards", run_row, [PlannedUnit("u", 0, "ckpt", "data", 3)])
    assert sink.chunks_done("r", "u").n_chunks == 0
    assert sink.write_chunk("r", "u", 0, chunk_rows(0, ["a", "b"], b"first"))
    assert not sink.write_chunk("r", "u", 0, chunk_rows(0, ["a", "b"], b"again"))  # once only
    assert sink.write_chunk("r", "u", 1, chunk_rows(1, ["c"], b"second"))
    done = sink.chunks_done("r", "u")
    assert (done.n_chunks, done.example_ids, done.n_variants, done.n_canonical_correct) == (
        2,
        ("a", "b", "c"),
        6,
        2,
    )
    assert done.seconds == pytest.approx(0.5)
    assert sink.chunk_states("r", "u") == [b"first", b"second"]
    units = unit_columns(
        UnitKey("r", "u", "m", "d"),
        UnitDone(
            shard=0,
            checkpoint="c",
            n_examples=3,
            n_variants=6,
            accuracy=2 / 3,
            seconds=0.5,
            provider="CPU",
            n_chunks=2,
        ),
    )
    assert sink.write("r", "u", {"units": units}) and not sink.write("r", "u", {"units": units})
    assert sink.finished("r", ["u"]) == {"u"}
    sink.close()
    db = tmp_path / "r.duckdb"
    if sink_kind == "parquet":
        assert merge_shards([tmp_path / "shards"], db).merged == ["u"]
    with Store(db, read_only=True) as store:
        assert store.query("SELECT count(*), count(state) FROM unit_chunks")[1] == [(2, 0)]
        assert store.query("SELECT count(*) FROM item_scores")[1] == [(3,)]
        assert store.query("SELECT n_chunks, status FROM units")[1] == [(2, "done")]


def test_chunk_states_larger_together_than_the_buffer_pool_are_read(tmp_path):
    """A unit's chunk states (activations for the neighbourhood metrics: ~55 MB a chunk for SmolLM2 at
    30 items) read all at once outgrew the writer's 1 GB buffer pool at the finish of a 300-item MMLU unit;
    read one chunk at a time they never hold more than one: here 6 states of 4 MB under a 16 MB pool."""
    rng = np.random.default_rng(0)
    states = [rng.bytes(4 * 1024 * 1024) for _ in range(6)]
    with Store(tmp_path / "r.duckdb") as store:
        store.insert(
            "unit_chunks",
            {
                "run_id": ["r"] * 6,
                "unit_id": ["u"] * 6,
                "chunk": list(range(6)),
                "model_id": ["m"] * 6,
                "dataset_id": ["d"] * 6,
                "state": states,
            },
        )
        store.query("SET threads = 1")  # DuckDB's per-thread buffers: the same on every machine
        store.query("SET memory_limit = '16MB'")
        assert store.chunk_states("r", "u") == states


def test_a_file_with_freed_blocks_is_rewritten_without_them(tmp_path):
    """What a unit's chunk states leave behind (written, then deleted) is given back to the disk: the file
    ends at most 1.2x its used blocks, every row and the schema as they were; a file another run is still
    writing is left alone."""
    import os
    import socket

    from sago_fast.store.compact import blocks, compact

    path = tmp_path / "r.duckdb"
    with Store(path) as store:
        store.insert("runs", {"run_id": ["r"], "created_at": [datetime(2026, 1, 1)], "status": ["done"]})
        store.query("CREATE TABLE staged AS SELECT range AS i, random() AS x FROM range(2000000)")
        store.query("DROP TABLE staged")
    size = path.stat().st_size
    assert compact(path, slack=1.2) is not None
    with Store(path, read_only=True) as store:
        after = blocks(store)
        assert store.query("SELECT run_id, status FROM runs")[1] == [("r", "done")]
        assert store.query("SELECT max(version) FROM schema_version")[1] == [(SCHEMA_VERSION,)]
    assert after.slack <= 1.2 and path.stat().st_size < size / 4
    assert compact(path) is None  # nothing left to give back

    with Store(path) as store:  # a run still writing the file (this process, alive): left alone
        store.insert(
            "runs",
            {
                "run_id": ["s"],
                "created_at": [datetime(2026, 1, 1)],
                "status": ["running"],
                "host": [socket.gethostname()],
                "pid": [os.getpid()],
            },
        )
        store.query("CREATE TABLE staged AS SELECT range AS i FROM range(2000000)")
        store.query("DROP TABLE staged")
    assert compact(path) is None


def test_a_finished_units_layer_rows_are_clustered_and_unchanged(tmp_path):
    """Chunks write a unit's layer rows interleaved; its last transaction rewrites them in LAYER_ORDER
    (one metric, pooling and family together: DuckDB then skips the others' row groups), the same rows,
    and leaves another unit's rows where they were."""
    from sago_fast.units.rows import UnitDone, UnitKey, unit_columns

    rng = np.random.default_rng(0)
    n = 600

    def layer_rows(model):
        rows = {
            "run_id": ["r"] * n,
            "model_id": [model] * n,
            "dataset_id": ["d"] * n,
            "example_id": [f"e{i % 7}" for i in range(n)],
            "layer": rng.integers(0, 5, n).tolist(),
            "pooling": rng.choice(["mean", "last"], n).tolist(),
            "metric": rng.choice(["dispersion", "dispersion_raw", "knn_instability"], n).tolist(),
            "family": [None if f == "none" else f for f in rng.choice(["none", "typo", "template"], n)],
            "value": rng.random(n).tolist(),
        }
        return rows

    with Store(tmp_path / "c.duckdb") as store:
        store.insert("layer_scores", layer_rows("other"))
        for _ in range(3):  # three chunks of the unit
            store.insert("layer_scores", layer_rows("m"))
        before = store.query("SELECT * FROM layer_scores WHERE model_id = 'm' ORDER BY ALL")[1]
        others = store.query("SELECT * FROM layer_scores WHERE model_id = 'other' ORDER BY rowid")[1]
        units = unit_columns(
            UnitKey("r", "u", "m", "d"),
            UnitDone(
                shard=0,
                checkpoint="c",
                n_examples=7,
                n_variants=7,
                accuracy=0.5,
                seconds=1.0,
                provider="CPU",
                n_chunks=3,
            ),
        )
        assert store.write_unit("r", "u", {"units": units})
        after = store.query("SELECT * FROM layer_scores WHERE model_id = 'm' ORDER BY ALL")[1]
        assert after == before
        assert store.query("SELECT * FROM layer_scores WHERE model_id = 'other' ORDER BY rowid")[1] == others
        stored = store.query(
            "SELECT family IS NOT NULL, coalesce(family, ''), pooling, metric, layer "
            "FROM layer_scores WHERE model_id = 'm' ORDER BY rowid"
        )[1]
        assert stored == sorted(stored)
        assert store.query("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'unit_layer_rows'")[
            1
        ] == [(0,)]
