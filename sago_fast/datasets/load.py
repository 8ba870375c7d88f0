"""Turn ``--dataset NAME_OR_PATH`` into examples: a built-in suite name or a data file/folder."""

from __future__ import annotations

import csv
import hashlib
import logging
from pathlib import Path
from typing import Any

from sago_fast.datasets.builtin import SUITES
from sago_fast.datasets.formats import FORMATS, detect, mmlu_rows, parse_records, split_prefix
from sago_fast.datasets.readers import FieldMap, examples_from_records, has_field, source_records
from sago_fast.errors import InputError
from sago_fast.hashing import update_with_file
from sago_fast.registry import UnknownNameError
from sago_fast.types import Dataset, Example

log = logging.getLogger(__name__)


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        update_with_file(digest, file)
    return digest.hexdigest()[:12]


def load_dataset(
    name_or_path: str, *, fields: FieldMap = FieldMap(), limit: int | None = None, seed: int = 0
) -> Dataset:
    """:func:`read_dataset`, with a warning when some examples list the same option twice."""
    dataset = read_dataset(name_or_path, fields=fields, limit=limit, seed=seed)
    repeated = [e.example_id for e in dataset.examples if len(set(e.options)) < len(e.options)]
    if repeated:
        log.warning(
            "%s: %d example(s) list the same option twice (first: %s): the copies score the same and a tie "
            "goes to the first, so a gold answer that is a later copy is never chosen",
            dataset.source,
            len(repeated),
            repeated[0],
        )
    return dataset


def read_dataset(
    name_or_path: str, *, fields: FieldMap = FieldMap(), limit: int | None = None, seed: int = 0
) -> Dataset:
    """A built-in suite (``arithmetic``, ``capitals``, ``comparison``, ``letters``), a data file or folder
    (SPEC schema, or a published format detected from its shape or named by a prefix: ``mmlu:path``), or
    a Hugging Face hub dataset ``hf:ORG/NAME[:CONFIG][:SPLIT]``, or an lm-evaluation-harness task YAML
    with local data ``lmeval:task.yaml`` (:mod:`sago_fast.lmeval.tasks`)."""
    if limit is not None and limit < 1:
        raise InputError(f"--limit must be positive, not {limit}")
    if name_or_path in SUITES:
        examples = SUITES.get(name_or_path).build(limit, seed=seed)
        suffix = "" if seed == 0 else f"@seed{seed}"
        return Dataset(f"{name_or_path}{suffix}", name_or_path, "built-in", tuple(examples))
    if name_or_path.startswith("hf:"):
        from sago_fast.datasets.hub import load_hub_dataset

        return load_hub_dataset(name_or_path, fields, limit)
    if name_or_path.startswith("lmeval:"):
        from sago_fast.lmeval.tasks import load_lmeval_task

        return load_lmeval_task(name_or_path, limit)
    fmt, target = split_prefix(name_or_path)
    path = Path(target)
    if path.exists():
        examples, reader = read_any(path, fields, fmt)
        if limit is not None:
            examples = examples[:limit]
        log.info("dataset %s read as %s", path, reader)
        return Dataset(f"{path.stem}-{_file_hash(path)}", path.stem, str(path), tuple(examples), reader)
    looks_like_path = fmt is not None or any(ch in name_or_path for ch in "/\\.")
    if looks_like_path:
        raise InputError(f"{target}: no such dataset file")
    try:
        SUITES.get(name_or_path)
    except UnknownNameError as exc:
        raise InputError(f"{exc} — or give a path to a .jsonl/.csv/.parquet file") from None
    raise AssertionError("unreachable")


def read_any(path: Path, fields: FieldMap, fmt: str | None) -> tuple[list[Example], str]:
    """Examples of ``path`` and the reader used: ``fmt`` when given, else the SPEC schema when the first
    record has its fields, else the one published format the record's shape matches."""
    if fmt == "mmlu" or (fmt is None and looks_like_mmlu(path)):
        return parse_records("mmlu", mmlu_rows(path), path), "mmlu"
    records = list(source_records(path))  # read once, whatever reads them
    if fmt is None and records and not _spec_shaped(records[0][1], fields):
        fmt = detect(records[0][1])
    if fmt is not None:
        located = ((f"{path}:{line}", f"{path.stem}-{line}", record) for line, record in records)
        return parse_records(fmt, located, path), fmt
    return examples_from_records(path, records, fields), "sago"


def _spec_shaped(record: Any, fields: FieldMap) -> bool:
    return (
        has_field(record, fields.options)
        or has_field(record, fields.prompt)
        or (has_field(record, fields.a) and has_field(record, fields.b))
    )


def looks_like_mmlu(path: Path) -> bool:
    """A CSV whose first row is 6 cells ending in an answer letter, no header; or a folder of CSV files
    that is not a save_to_disk folder (MMLU's layout: its reader then names a malformed file's line)."""
    files = sorted(path.glob("*.csv")) if path.is_dir() else [path] if path.suffix.lower() == ".csv" else []
    if not files or (path.is_dir() and (path / "state.json").is_file()):
        return False
    if path.is_dir():
        return not (path / "dataset_dict.json").is_file()
    with files[0].open(newline="", encoding="utf-8", errors="replace") as handle:
        row = next(csv.reader(handle), [])
    return len(row) == 6 and row[-1].strip() in ("A", "B", "C", "D")


__all__ = ["FORMATS", "Dataset", "load_dataset", "read_any"]
