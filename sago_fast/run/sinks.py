"""Where a run's rows go (one :class:`Sink` protocol): the DuckDB results file, or a Parquet shard folder.

A unit is written chunk by chunk, each chunk all or nothing with its ``unit_chunks`` row (which carries its
dataset scorers' partial state), then finished: its last rows and its done mark (``units``) together.

- DuckDB: one transaction per chunk and one for the finish (:meth:`Store.write_chunk`,
  :meth:`Store.write_unit`), the file open only for each of them, so that other processes read and write
  it in between; units are claimed in the file first (:mod:`sago_fast.run.claims`).
- Parquet: chunk folders ``<root>/<run_id>/.<unit_id>.chunks/<chunk>/`` (each written under a temporary
  name and renamed), joined at the finish into the unit folder ``<root>/<run_id>/<unit_id>/`` holding
  ``<table>.parquet`` and ``manifest.json`` (row counts per table, the run row, the planned units).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from sago_fast.atomic import atomic_path
from sago_fast.errors import InputError
from sago_fast.run.claims import Claim, ClaimingSink, Claims, ClaimSettings, PlannedUnit
from sago_fast.store import Store
from sago_fast.store.shared import SharedFile
from sago_fast.store.store import ChunksDone
from sago_fast.units.rows import TableRows
from sago_fast.variants.design import CellDesign

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
DESIGN_FILE = "design.json"  # the cell design of the run a shard folder holds
SHARD_FORMAT = 1
CHUNK_DONE = "chunk.json"


class Sink(ClaimingSink, Protocol):
    """Receives a run's chunks and finished units."""

    where: str  # the database file or shard folder, for messages

    def finished(self, run_id: str, unit_ids: Sequence[str]) -> set[str]:
        """The units among ``unit_ids`` already finished by an earlier invocation."""

    def write_chunk(self, run_id: str, unit_id: str, chunk: int, rows: TableRows) -> bool:
        """Write one chunk (all or nothing); False when it was already there."""

    def chunk_states(self, run_id: str, unit_id: str) -> list[bytes]:
        """The committed chunks' partial states, in chunk order."""

    def write(self, run_id: str, unit_id: str, rows: TableRows) -> bool:
        """Finish one unit: its last rows and done mark (all or nothing); False when already done."""

    def finish(self, run_id: str, status: str, provider: str) -> tuple[int, int]:
        """Record how the run ended; returns (units of the run not done, other live processes on it)."""

    def release(self, run_id: str, unit_id: str, state: str, error: str | None = None) -> None:
        """This process's claim ends: ``done``, ``failed`` (with ``error``) or ``waiting``."""

    def close(self) -> None: ...


def design_of(config_json: str | None) -> CellDesign:
    """The cell design a ``runs.config_json`` asked for (runs before designs existed: full)."""
    config = json.loads(config_json or "{}")
    return CellDesign(config.get("design", "full"), config.get("families_per_item"))


def run_design(run_row: dict[str, list[Any]]) -> CellDesign:
    """The cell design of the run row being written (a row without its settings: full)."""
    return design_of(run_row.get("config_json", [None])[0])


def check_same_design(store: Store, run_row: dict[str, list[Any]]) -> None:
    """InputError, before anything is written, when the results file holds this run (the same settings and
    units) under another cell design: resuming it would mix its cells."""
    run_id = run_row["run_id"][0]
    _, rows = store.query("SELECT config_json FROM runs WHERE run_id = $run", {"run": run_id})
    if rows:
        refuse_other_design(store.path, run_id, design_of(rows[0][0]), run_design(run_row))


def refuse_other_design(where: str, run_id: str, before: CellDesign, now: CellDesign) -> None:
    if before != now:
        raise InputError(
            f"{where}: run {run_id} is in this file under design {before.label}; resuming it with "
            f"{now.label} would mix its cells: run it with --design {before.name}"
            + (f" --families-per-item {before.families_per_item}" if before.sampled else "")
            + ", or write to another --db"
        )


class DuckDBSink:
    """The results database, shared with other processes (:mod:`sago_fast.store.shared`): each step opens
    the file, does its work in one transaction and closes it, so readers and other runs get in between.
    On open: the run's row, this process's worker row and the planned units (:mod:`sago_fast.run.claims`),
    then a heartbeat until :meth:`finish`."""

    def __init__(
        self,
        db: str | os.PathLike[str],
        run_row: dict[str, list[Any]],
        planned: Sequence[PlannedUnit] = (),
        settings: ClaimSettings = ClaimSettings(),
    ) -> None:
        self.file = SharedFile(db)
        self.where = str(db)
        run_id = run_row["run_id"][0]
        self.claims = Claims(self.file, run_id, settings=settings)
        with self.file.step() as store, store.transaction():
            check_same_design(store, run_row)
            store.mark_dead_runs(settings.stale_after_s)
            store.insert("runs", run_row, key=("run_id",))
            store.claim_run(run_id)
            self.claims.register(store, planned)
        self.claims.start_heartbeat()

    def finished(self, run_id: str, unit_ids: Sequence[str]) -> set[str]:
        with self.file.step() as store:
            return store.done_units(run_id) & set(unit_ids)

    def chunks_done(self, run_id: str, unit_id: str) -> ChunksDone:
        with self.file.step() as store:
            return store.chunks_done(run_id, unit_id)

    def write_chunk(self, run_id: str, unit_id: str, chunk: int, rows: TableRows) -> bool:
        with self.file.step() as store:
            return write_chunk(store, run_id, unit_id, chunk, rows)

    def chunk_states(self, run_id: str, unit_id: str) -> list[bytes]:
        with self.file.step() as store:
            return store.chunk_states(run_id, unit_id)

    def write(self, run_id: str, unit_id: str, rows: TableRows) -> bool:
        with self.file.step() as store:
            return write_rows(store, run_id, unit_id, rows)

    def claim(self, run_id: str, unit_id: str) -> Claim:
        with self.file.step() as store:
            return self.claims.claim(store, unit_id)

    def release(self, run_id: str, unit_id: str, state: str, error: str | None = None) -> None:
        with self.file.step() as store:
            self.claims.release(store, unit_id, state, error)

    def held_elsewhere(self, run_id: str, unit_ids: Sequence[str]) -> bool:
        with self.file.step() as store:
            return self.claims.held_elsewhere(store, unit_ids)

    def shares_cores(self) -> bool:
        with self.file.step() as store:
            return self.claims.others_here(store)

    def _left(self, store: Store, run_id: str) -> tuple[int, int]:
        _, rows = store.query(
            """SELECT count(*) FROM run_units r WHERE r.run_id = $run AND NOT EXISTS
               (SELECT 1 FROM units u WHERE u.run_id = r.run_id AND u.unit_id = r.unit_id AND u.status = 'done')""",
            {"run": run_id},
        )
        others = set(self.claims.live_workers(store)) - {self.claims.worker.worker_id}
        return int(rows[0][0]), len(others)

    def finish(self, run_id: str, status: str, provider: str) -> tuple[int, int]:
        """This worker ends (its unfinished claims go back to waiting); the run is ``status``, unless
        every planned unit is done (``unscored``: its statistics are to come) or other processes still
        work on it (``running``). Returns (units not done, other live processes)."""
        self.claims.stop()
        with self.file.step() as store, store.transaction():
            self.claims.finish(store, "interrupted" if status == "interrupted" else "finished")
            left, others = self._left(store, run_id)
            if not left:
                status = "unscored"
            elif others:
                status = "running"
            store.set_run_status(run_id, status, provider)
        return left, others

    def close(self) -> None:
        self.claims.stop()
        self.file.close()


def write_chunk(store: Store, run_id: str, unit_id: str, chunk: int, rows: TableRows) -> bool:
    """One chunk's rows in one transaction (a seam the fault tests replace)."""
    return store.write_chunk(run_id, unit_id, chunk, rows)


def write_rows(store: Store, run_id: str, unit_id: str, rows: Mapping[str, Any]) -> bool:
    """A unit's last rows and done mark in one transaction; False (nothing written) when the unit is
    already done, so writing the same unit twice never duplicates rows."""
    return store.write_unit(run_id, unit_id, rows)


class ParquetShardSink:
    """Parquet folders per chunk, joined per unit when it finishes (see the module docstring)."""

    def __init__(
        self, root: str | os.PathLike[str], run_row: dict[str, list[Any]], planned: Sequence[PlannedUnit]
    ) -> None:
        self.root = Path(root)
        self.where = str(self.root)
        self.run_row = run_row
        self.planned_units = [dataclasses.asdict(u) for u in planned]  # the manifest's planned units
        self._check_design(run_row)

    def _check_design(self, run_row: dict[str, list[Any]]) -> None:
        """The run's cell design in ``<run>/design.json``; a shard folder holding this run under another
        design (a folder from before designs: full) is refused before anything is written."""
        run_id = run_row["run_id"][0]
        now = run_design(run_row)
        marker = self.root / run_id / DESIGN_FILE
        if marker.is_file():
            refuse_other_design(str(self.root), run_id, CellDesign(**json.loads(marker.read_text())), now)
            return
        if (self.root / run_id).is_dir():
            refuse_other_design(str(self.root), run_id, CellDesign(), now)
        with atomic_path(marker) as tmp:
            tmp.write_text(json.dumps(dataclasses.asdict(now)), encoding="utf-8")

    def finished(self, run_id: str, unit_ids: Sequence[str]) -> set[str]:
        return {u for u in unit_ids if self.done(run_id, u)}

    def finish(self, run_id: str, status: str, provider: str) -> tuple[int, int]:
        return 0, 0  # each unit folder carries the run row; `sago merge` sets the status

    def claim(self, run_id: str, unit_id: str) -> Claim:
        return Claim("mine")  # a shard folder has one writer: its shard's units are its own

    def release(self, run_id: str, unit_id: str, state: str, error: str | None = None) -> None:
        return None

    def held_elsewhere(self, run_id: str, unit_ids: Sequence[str]) -> bool:
        return False

    def shares_cores(self) -> bool:
        return False  # a shard folder has one writer

    def close(self) -> None:
        return None

    def unit_dir(self, run_id: str, unit_id: str) -> Path:
        return self.root / run_id / unit_id

    def chunks_dir(self, run_id: str, unit_id: str) -> Path:
        return self.root / run_id / f".{unit_id}.chunks"

    def done(self, run_id: str, unit_id: str) -> bool:
        return (self.unit_dir(run_id, unit_id) / MANIFEST).is_file()

    def _chunk_folders(self, run_id: str, unit_id: str) -> list[Path]:
        folder = self.chunks_dir(run_id, unit_id)
        if not folder.is_dir():
            return []
        return sorted(p for p in folder.iterdir() if p.is_dir() and (p / CHUNK_DONE).is_file())

    def chunks_done(self, run_id: str, unit_id: str) -> ChunksDone:
        import pyarrow.parquet as pq

        ids: list[str] = []
        values: list[str | None] = []
        n_variants = n_correct = 0
        seconds = 0.0
        folders = self._chunk_folders(run_id, unit_id)
        for folder in folders:
            row = pq.read_table(folder / "unit_chunks.parquet").to_pylist()[0]
            ids += row["example_ids"]
            n_variants += row["n_variants"]
            n_correct += row["n_canonical_correct"]
            seconds += row["seconds"]
            values.append(row.get("sequence_values"))
        return ChunksDone(len(folders), tuple(ids), n_variants, n_correct, seconds, tuple(values))

    def chunk_states(self, run_id: str, unit_id: str) -> list[bytes]:
        import pyarrow.parquet as pq

        return [
            pq.read_table(folder / "unit_chunks.parquet", columns=["state"]).column("state")[0].as_py()
            for folder in self._chunk_folders(run_id, unit_id)
        ]

    def write_chunk(self, run_id: str, unit_id: str, chunk: int, rows: TableRows) -> bool:
        if self.done(run_id, unit_id):
            return False
        final = self.chunks_dir(run_id, unit_id) / f"{chunk:06d}"
        if (final / CHUNK_DONE).is_file():
            return False
        _write_folder(final, rows)
        return True

    def write(self, run_id: str, unit_id: str, rows: TableRows) -> bool:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from sago_fast.store.store import _arrow_column

        if self.done(run_id, unit_id):
            return False
        tables: dict[str, list[Any]] = {}
        for folder in self._chunk_folders(run_id, unit_id):
            for file in sorted(folder.glob("*.parquet")):
                table = pq.read_table(file)
                if file.stem == "unit_chunks":  # the partial state is not needed once the unit is finished
                    table = table.set_column(
                        table.schema.get_field_index("state"), "state", pa.nulls(table.num_rows, pa.binary())
                    )
                tables.setdefault(file.stem, []).append(table)
        for table, columns in {"runs": self.run_row, **rows}.items():
            tables.setdefault(table, []).append(pa.table({n: _arrow_column(v) for n, v in columns.items()}))
        joined = {name: pa.concat_tables(parts, promote_options="default") for name, parts in tables.items()}
        manifest = {
            "format": SHARD_FORMAT,
            "run_id": run_id,
            "unit_id": unit_id,
            "planned_units": self.planned_units,
        }
        _write_folder(self.unit_dir(run_id, unit_id), joined, manifest)
        shutil.rmtree(self.chunks_dir(run_id, unit_id), ignore_errors=True)
        return True


def _write_folder(
    final: Path, tables: Mapping[str, Any], manifest: dict[str, Any] | None = None
) -> dict[str, int]:
    """Write ``<table>.parquet`` files and a done file (the manifest with row counts, or a chunk's
    ``chunk.json``) under a temporary name, then rename the folder into place."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sago_fast.store.store import _arrow_column

    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        counts = {}
        for table, columns in tables.items():
            arrow = (
                columns
                if isinstance(columns, pa.Table)
                else pa.table({name: _arrow_column(values) for name, values in columns.items()})
            )
            pq.write_table(arrow, tmp / f"{table}.parquet")
            counts[table] = arrow.num_rows
        done_name = MANIFEST if manifest is not None else CHUNK_DONE
        (tmp / done_name).write_text(
            json.dumps({**(manifest or {}), "rows": counts}, indent=1), encoding="utf-8"
        )
        if final.exists():  # an incomplete folder from a killed writer: never read, replaced
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return counts
