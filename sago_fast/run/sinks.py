"""Where a finished unit's rows go (one :class:`Sink` protocol): the DuckDB results file (one transaction
per unit, done mark included) or a Parquet shard folder (one folder per unit, written under a temporary
name and renamed)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from sago_fast.run.worker import Rows
from sago_fast.store import Store
from sago_fast.store.schema import ROW_KEYS

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
SHARD_FORMAT = 1


class Sink(Protocol):
    """Receives a run's finished units."""

    where: str  # the database file or shard folder, for messages

    def finished(self, run_id: str, unit_ids: Sequence[str]) -> set[str]:
        """The units among ``unit_ids`` already written by an earlier invocation."""

    def write(self, run_id: str, unit_id: str, rows: Rows) -> bool:
        """Write one unit (all or nothing); False when it was already there."""

    def finish(self, run_id: str, status: str, provider: str) -> None:
        """Record how the run ended."""

    def close(self) -> None: ...


class DuckDBSink:
    """The results database: the run's row on open, one transaction per unit, its status at the end."""

    def __init__(self, db: str | os.PathLike[str], run_row: dict[str, list[Any]]) -> None:
        self.store = Store(db)
        self.where = str(db)
        run_id = run_row["run_id"][0]
        with self.store.transaction():
            self.store.insert("runs", run_row, key=("run_id",))
            self.store.set_run_status(run_id, "running")

    def finished(self, run_id: str, unit_ids: Sequence[str]) -> set[str]:
        return self.store.done_units(run_id) & set(unit_ids)

    def write(self, run_id: str, unit_id: str, rows: Rows) -> bool:
        return write_rows(self.store, run_id, unit_id, rows)

    def finish(self, run_id: str, status: str, provider: str) -> None:
        self.store.set_run_status(run_id, status, provider)

    def close(self) -> None:
        self.store.close()


def write_rows(store: Store, run_id: str, unit_id: str, rows: Rows | dict[str, Any]) -> bool:
    """Insert one unit's rows and its done mark in one transaction; False (nothing written) when the
    unit is already done, so writing the same unit twice never duplicates rows."""
    with store.transaction():
        if store.unit_done(run_id, unit_id):
            return False
        for table, columns in rows.items():
            store.insert(table, columns, key=ROW_KEYS.get(table, ()))
    return True


class ParquetShardSink:
    """Unit folders ``<root>/<run_id>/<unit_id>/`` holding ``<table>.parquet`` and ``manifest.json``
    (row counts per table, the run row, the planned units), renamed into place when complete."""

    def __init__(
        self, root: str | os.PathLike[str], run_row: dict[str, list[Any]], planned_units: list[str]
    ) -> None:
        self.root = Path(root)
        self.where = str(self.root)
        self.run_row = run_row
        self.planned_units = planned_units

    def finished(self, run_id: str, unit_ids: Sequence[str]) -> set[str]:
        return {u for u in unit_ids if self.done(run_id, u)}

    def finish(self, run_id: str, status: str, provider: str) -> None:
        return None  # each unit folder carries the run row; `sago merge` sets the status

    def close(self) -> None:
        return None

    def unit_dir(self, run_id: str, unit_id: str) -> Path:
        return self.root / run_id / unit_id

    def done(self, run_id: str, unit_id: str) -> bool:
        return (self.unit_dir(run_id, unit_id) / MANIFEST).is_file()

    def write(self, run_id: str, unit_id: str, rows: Rows) -> bool:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from sago_fast.store.store import _arrow_column

        final = self.unit_dir(run_id, unit_id)
        if (final / MANIFEST).is_file():
            return False
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{unit_id}.", suffix=".tmp", dir=final.parent))
        try:
            counts = {}
            for table, columns in {"runs": self.run_row, **rows}.items():
                arrow = pa.table({name: _arrow_column(values) for name, values in columns.items()})
                pq.write_table(arrow, tmp / f"{table}.parquet")
                counts[table] = arrow.num_rows
            manifest = {
                "format": SHARD_FORMAT,
                "run_id": run_id,
                "unit_id": unit_id,
                "rows": counts,
                "planned_units": self.planned_units,
            }
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
            if final.exists():  # an incomplete folder from a killed writer: never read, replaced
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
        return True
