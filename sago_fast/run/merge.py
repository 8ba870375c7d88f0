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
    planned: dict[str, set[str]] = {}
    with Store(db) as store:
        for folder in folders:
            try:
                manifest, tables = read_unit(folder)
            except ValueError as exc:
                result.damaged.append((str(folder), str(exc)))
                log.warning("skipping %s: %s", folder, exc)
                continue
            run_id, unit_id = manifest["run_id"], manifest["unit_id"]
            planned.setdefault(run_id, set()).update(manifest["planned_units"])
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
            store.set_run_status(run_id, status, provider="units")
            result.runs[run_id] = status
    return result
