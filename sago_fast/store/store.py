"""The one store object: open (migrating if needed), insert column batches, query with parameters."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sago_fast import defaults
from sago_fast.errors import OutdatedSchemaError, StoreError
from sago_fast.store.liveness import dead_reason, process_alive
from sago_fast.store.locking import connect_waiting
from sago_fast.store.migrations import MIGRATIONS

log = logging.getLogger(__name__)

SCHEMA_VERSION = MIGRATIONS[-1].version
MEMORY = ":memory:"


def check_db_name(path: str | os.PathLike[str]) -> None:
    """StoreError (one line) for a results-file path DuckDB cannot open: its name must be valid UTF-8."""
    name = os.fspath(path)
    try:
        (name.decode() if isinstance(name, bytes) else name).encode("utf-8")
    except UnicodeError:
        shown = os.fsencode(name).decode("utf-8", errors="backslashreplace")
        raise StoreError(
            f"{shown}: the results file's name is not valid UTF-8 (DuckDB needs UTF-8 names)"
        ) from None


def check_results_file(path: str | os.PathLike[str], what: str) -> None:
    """Before any work, for a command that will write results into ``path`` (``what``: its flag): a name
    DuckDB opens, a file that can be written, and an existing file that is a sago results file (a foreign
    one is refused untouched; an older one is migrated now)."""
    from sago_fast.atomic import check_writable

    check_db_name(path)
    check_writable(path, what=what)
    if Path(path).exists():
        Store(path).close()


def check_can_store(path: str | os.PathLike[str], what: str) -> None:
    """StoreError (one line) when results could not be written into the existing file ``path``: the file,
    or the folder its write-ahead log goes to, is read-only. ``what``: what would be stored."""
    file = Path(path)
    for where in (file, file.parent):
        if not os.access(where, os.W_OK):
            kind = "file" if where == file else "folder"
            raise StoreError(
                f"{file}: the {kind} is read-only, so {what} cannot be stored in it; use a writable copy"
            )


def _connect(path: str, read_only: bool, wait: float | None) -> Any:
    if path == MEMORY:
        import duckdb

        return duckdb.connect(path)
    if read_only and not Path(path).is_file():
        raise StoreError(f"{path}: no such database file")
    return connect_waiting(path, read_only, wait)


def _as_list(values: Any) -> list[Any]:
    """A column given as a list, a numpy array or an Arrow array, as a list of Python values."""
    return values.to_pylist() if hasattr(values, "to_pylist") else list(values)


def _arrow_column(values: Any) -> Any:
    """numpy arrays and Arrow arrays go in as they are (zero-copy); other sequences as lists."""
    import pyarrow as pa

    if isinstance(values, (pa.Array, pa.ChunkedArray)) or hasattr(values, "dtype"):
        return values
    return list(values)


@dataclass(frozen=True)
class ChunksDone:
    """A unit's committed chunks: how many, their examples (in order), variants, correct canonical
    answers and seconds, summed."""

    n_chunks: int
    example_ids: tuple[str, ...]
    n_variants: int
    n_canonical_correct: int
    seconds: float
    sequence_values: tuple[str | None, ...] = ()  # per chunk, in order: a sequential unit's followed values


class Store:
    """A DuckDB results file (or ``":memory:"`` for tests).

    Opening read-write applies pending migrations in one transaction; opening read-only refuses a file
    whose schema is older or newer than this version of sago_fast. A database sago did not create (tables
    but no ``schema_version``) is refused untouched; so is one without any sago schema at all unless
    ``create`` (``sago run`` and ``sago merge`` create results files; ``stats`` and ``report`` only read
    and add to them).

    A file another process holds is waited for, up to ``wait`` seconds (None: ``$SAGO_DB_WAIT``, else 30 s
    reading and 600 s writing), saying for whom (:mod:`sago_fast.store.locking`). Hold a Store only for as
    long as a step takes: every other process waits while it is open.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = MEMORY,
        *,
        read_only: bool = False,
        create: bool = True,
        wait: float | None = None,
    ) -> None:
        check_db_name(path)
        self.path = str(path)
        self.read_only = read_only
        if not read_only and self.path != MEMORY:
            if not create and not Path(self.path).is_file():
                raise StoreError(f"{self.path}: no such database file")
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.con = _connect(self.path, read_only, wait)
        if read_only:  # a reader that scans gigabytes would keep every page it read, up to 80% of memory
            self.limit_memory(defaults.READER_DB_MEMORY)
        version = self.schema_version()
        if version == 0 and self.path != MEMORY:
            self._refuse_foreign(create)
        if version > SCHEMA_VERSION:
            self.close()
            raise StoreError(
                f"{self.path}: schema version {version} is newer than this sago_fast ({SCHEMA_VERSION}); upgrade sago_fast"
            )
        if version < SCHEMA_VERSION:
            if read_only:
                self.close()
                raise OutdatedSchemaError(
                    f"{self.path}: schema version {version} is older than {SCHEMA_VERSION}; "
                    "open it once read-write (e.g. `sago run`) to migrate"
                )
            self._migrate(version)

    # -- schema -------------------------------------------------------------------------------------
    def _refuse_foreign(self, create: bool) -> None:
        """StoreError, with nothing written, for a database that is not a sago results file."""
        others = self.con.execute(
            "SELECT table_name FROM information_schema.tables ORDER BY table_name LIMIT 3"
        ).fetchall()
        if not others and create and not self.read_only:
            return  # a new (or empty) file: sago creates its schema in it
        self.close()
        found = f"it has {', '.join(r[0] for r in others)}" if others else "it is empty"
        raise StoreError(
            f"{self.path}: not a sago results file ({found} and no schema_version); "
            "sago does not write into a database it did not create"
        )

    def schema_version(self) -> int:
        exists = self.con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'"
        ).fetchone()[0]
        if not exists:
            return 0
        row = self.con.execute("SELECT max(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    def _migrate(self, current: int) -> None:
        with self.transaction():
            self.con.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER, description VARCHAR, applied_at TIMESTAMP)"
            )
            for migration in MIGRATIONS:
                if migration.version > current:
                    log.info(
                        "migrating %s to schema %d: %s", self.path, migration.version, migration.description
                    )
                    self.con.execute(migration.sql)
                    self.con.execute(
                        "INSERT INTO schema_version VALUES ($v, $d, now())",
                        {"v": migration.version, "d": migration.description},
                    )

    def tables(self) -> list[str]:
        rows = self.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY table_name"
        ).fetchall()
        return [r[0] for r in rows]

    def columns(self, table: str) -> list[str]:
        rows = self.con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = $t ORDER BY ordinal_position",
            {"t": table},
        ).fetchall()
        return [r[0] for r in rows]

    # -- writing ------------------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Everything inside commits together or not at all."""
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    def insert(
        self, table: str, columns: Mapping[str, Sequence[Any] | Any], *, key: Sequence[str] = ()
    ) -> int:
        """Append rows given as equal-length columns (lists or numpy arrays) in one set-based INSERT.

        key: columns identifying a row; rows whose key is already in the table are skipped (idempotent
        writes of models, datasets, ...). Table and column names are checked against the schema (never
        interpolated unchecked). Returns the number of rows given.
        """
        import pyarrow as pa

        known = self.columns(table)
        if not known:
            raise StoreError(f"unknown table {table!r}")
        unknown = [c for c in [*columns, *key] if c not in known or (c in key and c not in columns)]
        if unknown:
            raise StoreError(f"table {table!r} has no column(s) {', '.join(unknown)}")
        arrow = pa.table({name: _arrow_column(values) for name, values in columns.items()})
        if arrow.num_rows == 0:
            return 0
        view = "_sago_insert_batch"
        self.con.register(view, arrow)
        try:
            names = ", ".join(f'"{c}"' for c in columns)  # whitelisted above
            sql = f'INSERT INTO "{table}" ({names}) SELECT {names} FROM {view} AS new'
            if key:  # once per key, also within the batch
                keys = ", ".join(f'"{c}"' for c in key)
                match = " AND ".join(f'old."{c}" IS NOT DISTINCT FROM new."{c}"' for c in key)
                sql = (
                    f'INSERT INTO "{table}" ({names}) SELECT DISTINCT ON ({keys}) {names} FROM {view} AS new'
                    f' WHERE NOT EXISTS (SELECT 1 FROM "{table}" AS old WHERE {match})'
                )
            self.con.execute(sql)
        finally:
            self.con.unregister(view)
        return arrow.num_rows

    # -- reading ------------------------------------------------------------------------------------
    def query(
        self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run ``sql`` with bound ``params`` (``$name`` or ``?``); returns (column names, rows)."""
        import duckdb

        try:
            cursor = self.con.execute(sql, params) if params is not None else self.con.execute(sql)
        except duckdb.Error as exc:
            raise StoreError(f"SQL error: {str(exc).splitlines()[0]}") from None
        if cursor.description is None:
            return [], []
        return [d[0] for d in cursor.description], cursor.fetchall()

    def query_arrow(self, sql: str, params: Mapping[str, Any] | None = None) -> Any:
        """Run ``sql`` with bound ``params``; the result as a ``pyarrow.Table`` (columns, no Python object per
        value: for reads of millions of rows)."""
        import duckdb

        try:
            return self.con.sql(sql, params=dict(params or {})).to_arrow_table()
        except duckdb.Error as exc:
            raise StoreError(f"SQL error: {str(exc).splitlines()[0]}") from None

    def limit_memory(self, size: str) -> None:
        """Cap DuckDB's memory for this connection (``size``: e.g. "1GB"): a reader that scans gigabytes
        otherwise keeps the pages it read, up to 80% of the machine's memory."""
        self.query("SET memory_limit = $size", {"size": size})

    def statements(self, sql: str) -> list[str]:
        """``sql`` split into its statements (comments kept with the statement they precede), as DuckDB's
        own parser splits them; StoreError for text it cannot parse."""
        import duckdb

        try:
            return [statement.query for statement in self.con.extract_statements(sql)]
        except duckdb.Error as exc:
            raise StoreError(f"SQL error: {str(exc).splitlines()[0]}") from None

    def delete_rows(self, table: str, **equal: Any) -> None:
        """Delete the rows of ``table`` whose columns equal the given values (names checked, values bound)."""
        known = self.columns(table)
        if not known:
            raise StoreError(f"unknown table {table!r}")
        unknown = [c for c in equal if c not in known]
        if unknown or not equal:
            raise StoreError(f"table {table!r}: cannot delete by {', '.join(unknown) or 'nothing'}")
        where = " AND ".join(f'"{c}" = ${c}' for c in equal)  # whitelisted above
        self.con.execute(f'DELETE FROM "{table}" WHERE {where}', dict(equal))

    # -- the run lifecycle (one place for what sinks, merge, the pipeline and the report ask) ---------
    def done_units(self, run_id: str) -> set[str]:
        """The units of ``run_id`` whose rows and done mark are committed."""
        _, rows = self.query(
            "SELECT unit_id FROM units WHERE run_id = $run AND status = 'done'", {"run": run_id}
        )
        return {r[0] for r in rows}

    def unit_done(self, run_id: str, unit_id: str) -> bool:
        _, rows = self.query(
            "SELECT count(*) FROM units WHERE run_id = $run AND unit_id = $unit AND status = 'done'",
            {"run": run_id, "unit": unit_id},
        )
        return bool(rows[0][0])

    def chunks_done(self, run_id: str, unit_id: str) -> ChunksDone:
        """What a unit has committed chunk by chunk (an unfinished unit resumes after it)."""
        _, rows = self.query(
            """SELECT count(*), coalesce(flatten(list(example_ids ORDER BY chunk)), []),
                      coalesce(sum(n_variants), 0), coalesce(sum(n_canonical_correct), 0), coalesce(sum(seconds), 0),
                      coalesce(list(sequence_values ORDER BY chunk), [])
               FROM unit_chunks WHERE run_id = $run AND unit_id = $unit""",
            {"run": run_id, "unit": unit_id},
        )
        n, ids, n_variants, n_correct, seconds, values = rows[0]
        return ChunksDone(int(n), tuple(ids), int(n_variants), int(n_correct), float(seconds), tuple(values))

    def chunk_states(self, run_id: str, unit_id: str) -> list[bytes]:
        """The committed chunks' dataset-scorer states, in chunk order, read one chunk at a time: a chunk's
        state holds the activations the neighbourhood metrics keep (tens of MB for a 135M model), and all of
        them in one result would not fit the writer's bounded buffer pool (``SINK_MEMORY_LIMIT``)."""
        key = {"run": run_id, "unit": unit_id}
        _, chunks = self.query(
            "SELECT chunk FROM unit_chunks WHERE run_id = $run AND unit_id = $unit ORDER BY chunk", key
        )
        states = []
        for (chunk,) in chunks:
            _, rows = self.query(
                "SELECT state FROM unit_chunks WHERE run_id = $run AND unit_id = $unit AND chunk = $chunk",
                {**key, "chunk": chunk},
            )
            states.append(bytes(rows[0][0]))
        return states

    def write_chunk(
        self, run_id: str, unit_id: str, chunk: int, rows: Mapping[str, Mapping[str, Any]]
    ) -> bool:
        """Insert one chunk's rows (its ``unit_chunks`` row included) in one transaction; False (nothing
        written) when that chunk or the whole unit is already committed."""
        from sago_fast.store.schema import ROW_KEYS

        with self.transaction():
            _, found = self.query(
                """SELECT (SELECT count(*) FROM unit_chunks WHERE run_id = $run AND unit_id = $unit AND chunk = $chunk)
                        + (SELECT count(*) FROM units WHERE run_id = $run AND unit_id = $unit AND status = 'done')""",
                {"run": run_id, "unit": unit_id, "chunk": chunk},
            )
            if found[0][0]:
                return False
            for table, columns in rows.items():
                self.insert(table, columns, key=ROW_KEYS.get(table, ()))
        return True

    def write_unit(self, run_id: str, unit_id: str, rows: Mapping[str, Mapping[str, Any]]) -> bool:
        """Insert a unit's last rows and its done mark (``units``) in one transaction, dropping its chunks'
        partial states (no longer needed); False (nothing written) when the unit is already done."""
        from sago_fast.store.schema import ROW_KEYS

        with self.transaction():
            if self.unit_done(run_id, unit_id):
                return False
            for table, columns in rows.items():
                self.insert(table, columns, key=ROW_KEYS.get(table, ()))
            self.query(
                "UPDATE unit_chunks SET state = NULL WHERE run_id = $run AND unit_id = $unit",
                {"run": run_id, "unit": unit_id},
            )
            units = rows.get("units", {})
            ids = [_as_list(units.get(column, ())) for column in ("model_id", "dataset_id")]
            for model_id, dataset_id in zip(*ids, strict=True):
                self.cluster_layer_rows(run_id, model_id, dataset_id)
            self.query(  # its claim (a run on a shared file) ends with it
                "UPDATE run_units SET state = 'done' WHERE run_id = $run AND unit_id = $unit",
                {"run": run_id, "unit": unit_id},
            )
        return True

    LAYER_ORDER = "family IS NOT NULL, family, pooling, metric, layer"

    def cluster_layer_rows(self, run_id: str, model_id: str, dataset_id: str) -> None:
        """Rewrite one unit's ``layer_scores`` rows in ``LAYER_ORDER`` (its chunks wrote them interleaved).
        DuckDB keeps per row group the range of each column: with a unit's rows clustered, a query for one
        metric, pooling and family (the cookbook's per-layer profile) skips the row groups of the others
        instead of scanning every row of every checkpoint. Run inside the unit's last transaction."""
        where = "run_id = $run AND model_id = $model AND dataset_id = $dataset"
        unit = {"run": run_id, "model": model_id, "dataset": dataset_id}
        self.query(f"CREATE TEMP TABLE unit_layer_rows AS SELECT * FROM layer_scores WHERE {where}", unit)
        self.query(f"DELETE FROM layer_scores WHERE {where}", unit)
        self.query(f"INSERT INTO layer_scores SELECT * FROM unit_layer_rows ORDER BY {self.LAYER_ORDER}")
        self.query("DROP TABLE unit_layer_rows")  # a failure before rolls the transaction, and it, back

    def has_stats(self, run_id: str) -> bool:
        """Whether ``sago stats`` has written the run's statistics."""
        _, rows = self.query("SELECT count(*) FROM model_scores WHERE run_id = $run", {"run": run_id})
        return bool(rows[0][0])

    def set_run_status(self, run_id: str, status: str, provider: str | None = None) -> None:
        """Record how the run stands; ``provider`` None or empty keeps the recorded one, else the one
        given (``"units"``: the provider its finished units ran on)."""
        if provider == "units":
            self.query(
                """UPDATE runs SET status = $status,
                   provider = (SELECT any_value(provider) FROM units WHERE run_id = $run AND status = 'done')
                   WHERE run_id = $run""",
                {"status": status, "run": run_id},
            )
            return
        self.query(
            "UPDATE runs SET status = $status, provider = coalesce(nullif($provider, ''), provider) "
            "WHERE run_id = $run",
            {"status": status, "provider": provider or "", "run": run_id},
        )

    def claim_run(self, run_id: str) -> None:
        """Mark the run ``running`` in this process (host and pid recorded)."""
        import socket

        self.query(
            "UPDATE runs SET status = 'running', host = $host, pid = $pid WHERE run_id = $run",
            {"host": socket.gethostname(), "pid": os.getpid(), "run": run_id},
        )

    def mark_dead_runs(self, stale_after_s: float | None = None) -> list[str]:
        """Runs recorded as ``running`` none of whose writing processes is alive (killed, or the machine
        restarted; :mod:`sago_fast.store.liveness`) become ``interrupted``; returns their ids. A run from
        before ``workers`` were recorded is judged by its host and pid (other hosts' are left alone)."""
        import socket

        from sago_fast import defaults

        stale = defaults.STALE_AFTER_S if stale_after_s is None else stale_after_s
        _, runs = self.query("SELECT run_id, host, pid FROM runs WHERE status = 'running'")
        _, workers = self.query(
            "SELECT run_id, worker_id, host, pid, state, heartbeat_at FROM workers "
            "WHERE run_id IN (SELECT run_id FROM runs WHERE status = 'running')"
        )
        by_run: dict[str, list[tuple]] = {}
        for run_id, *worker in workers:
            by_run.setdefault(run_id, []).append(tuple(worker))
        dead = []
        for run_id, host, pid in runs:
            if run_id in by_run:
                alive = any(not dead_reason(w[0], w[1], w[2], w[3], w[4], stale) for w in by_run[run_id])
            else:
                alive = host != socket.gethostname() or pid is None or process_alive(int(pid))
            if not alive:
                dead.append(run_id)
                self.set_run_status(run_id, "interrupted")
        return dead

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
