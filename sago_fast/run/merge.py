"""``sago merge``: ingest Parquet unit folders written by ``sago run --shard i/N`` into a results file.

Each unit folder is checked completely (manifest present, every table readable, row counts as the
manifest says) before any of it is inserted; a damaged folder is reported and skipped, never half-read.
A unit already in the file is skipped, so merging the same shards twice changes nothing.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sago_fast.run.claims import PlannedUnit, record_planned
from sago_fast.run.sinks import MANIFEST, SHARD_FORMAT, write_rows
from sago_fast.store import Store

log = logging.getLogger(__name__)


@dataclass
class MergeResult:
    merged: list[str] = field(default_factory=list)  # unit ids inserted
    already: list[str] = field(default_factory=list)  # unit ids that were in the file
    damaged: list[tuple[str, str]] = field(default_factory=list)  # (folder, reason)
    runs: dict[str, str] = field(default_factory=dict)  # run id -> status after the merge


def _unit_folders(paths: Sequence[str | os.PathLike[str]]) -> tuple[list[Path], list[tuple[str, str]]]:
    folders, damaged = [], []
    for given in paths:
        root = Path(given)
        if not root.exists():
            damaged.append((str(root), "no such file or folder"))
            continue
        for parquet_dir in sorted(
            {p.parent for p in root.rglob("*.parquet")} | {p.parent for p in root.rglob(MANIFEST)}
        ):
            if any(part.startswith(".") for part in parquet_dir.relative_to(root).parts):
                damaged.append(
                    (str(parquet_dir), "incomplete (temporary folder of a writer that did not finish)")
                )
            elif not (parquet_dir / MANIFEST).is_file():
                damaged.append((str(parquet_dir), f"no {MANIFEST}"))
            else:
                folders.append(parquet_dir)
    return folders, damaged


def read_unit(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(manifest, table -> Arrow table), or ValueError naming what is wrong."""
    import pyarrow.parquet as pq

    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"unreadable {MANIFEST} ({exc})") from None
    if manifest.get("format") != SHARD_FORMAT:
        raise ValueError(f"shard format {manifest.get('format')!r}, expected {SHARD_FORMAT}")
    tables = {}
    for table, expected in manifest["rows"].items():
        try:
            arrow = pq.read_table(folder / f"{table}.parquet")
        except Exception as exc:
            raise ValueError(f"{table}.parquet is unreadable ({type(exc).__name__}: {exc})") from None
        if arrow.num_rows != expected:
            raise ValueError(f"{table}.parquet has {arrow.num_rows} rows, the manifest says {expected}")
        tables[table] = arrow
    return manifest, tables


def merge_shards(paths: Sequence[str | os.PathLike[str]], db: str | os.PathLike[str]) -> MergeResult:
    result = MergeResult()
    folders, result.damaged = _unit_folders(paths)
    if not folders:  # nothing to merge: the results file is not created or touched
        return result
    planned: dict[str, dict[str, PlannedUnit]] = {}
    with Store(db) as store:
        for folder in folders:
            try:
                manifest, tables = read_unit(folder)
            except ValueError as exc:
                result.damaged.append((str(folder), str(exc)))
                log.warning("skipping %s: %s", folder, exc)
                continue
            run_id, unit_id = manifest["run_id"], manifest["unit_id"]
            planned.setdefault(run_id, {}).update(_planned_units(manifest))
            runs = tables.pop("runs")
            unit_rows = {
                table: {name: arrow.column(name) for name in arrow.column_names}
                for table, arrow in tables.items()
            }
            with store.transaction():
                store.insert("runs", {n: runs.column(n) for n in runs.column_names}, key=("run_id",))
            if write_rows(store, run_id, unit_id, unit_rows):
                result.merged.append(unit_id)
            else:
                result.already.append(unit_id)
        for run_id, units in planned.items():
            status = "done" if len(store.done_units(run_id)) >= len(units) else "partial"
            with store.transaction():  # `sago status` reads the plan: the units not merged show as such
                record_planned(store, run_id, _described(store, run_id, units), state=NOT_MERGED)
                store.set_run_status(run_id, status, provider="units")
            result.runs[run_id] = status
    return result


NOT_MERGED = "not merged"  # a planned unit whose shard folder is not (yet) in the results file


def _planned_units(manifest: dict[str, Any]) -> dict[str, PlannedUnit]:
    """The run's planned units as a unit folder's manifest lists them (ids alone in older folders)."""
    units = {}
    for position, entry in enumerate(manifest["planned_units"]):
        if isinstance(entry, str):
            units[entry] = PlannedUnit(entry, position, "", "", 0)
        else:
            units[entry["unit_id"]] = PlannedUnit(**entry)
    return units


def _described(store: Store, run_id: str, units: dict[str, PlannedUnit]) -> list[PlannedUnit]:
    """``units`` with the checkpoint, dataset and examples of those merged filled in where the manifest
    (an older folder) did not say them."""
    _, rows = store.query(
        """SELECT u.unit_id, u.checkpoint, d.name, u.n_examples FROM units u
           LEFT JOIN (SELECT dataset_id, dataset AS name FROM dataset_names) d
           ON d.dataset_id = u.dataset_id WHERE u.run_id = $run""",
        {"run": run_id},
    )
    found = {unit_id: (checkpoint, dataset, n) for unit_id, checkpoint, dataset, n in rows}
    described = []
    for unit in units.values():
        checkpoint, dataset, n = found.get(unit.unit_id, ("", "", 0))
        described.append(
            PlannedUnit(
                unit.unit_id,
                unit.position,
                unit.checkpoint or checkpoint or "",
                unit.dataset or dataset or "",
                unit.n_examples or int(n or 0),
            )
        )
    return described
