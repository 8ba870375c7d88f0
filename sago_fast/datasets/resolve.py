"""Turn ``--dataset NAME_OR_PATH`` into examples: a built-in suite name or a data file/folder."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from sago_fast.datasets.builtin import SUITES
from sago_fast.datasets.readers import FieldMap, read_examples
from sago_fast.errors import InputError
from sago_fast.registry import UnknownNameError
from sago_fast.types import Example


@dataclass(frozen=True)
class Dataset:
    dataset_id: str  # suite name, or file stem + content hash prefix
    name: str
    source: str  # "built-in" or the file path
    examples: tuple[Example, ...]

    @property
    def task_types(self) -> tuple[str, ...]:
        return tuple(sorted({e.task_type for e in self.examples}))


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


def load_dataset(
    name_or_path: str, *, fields: FieldMap = FieldMap(), limit: int | None = None, seed: int = 0
) -> Dataset:
    """A built-in suite (``arithmetic``, ``capitals``, ``comparison``, ``letters``) or a dataset file."""
    if limit is not None and limit < 1:
        raise InputError(f"--limit must be positive, not {limit}")
    path = Path(name_or_path)
    if name_or_path in SUITES:
        examples = SUITES.get(name_or_path).build(limit, seed=seed)
        suffix = "" if seed == 0 else f"@seed{seed}"
        return Dataset(f"{name_or_path}{suffix}", name_or_path, "built-in", tuple(examples))
    if path.exists():
        examples = read_examples(path, fields)
        if limit is not None:
            examples = examples[:limit]
        return Dataset(f"{path.stem}-{_file_hash(path)}", path.stem, str(path), tuple(examples))
    looks_like_path = any(ch in name_or_path for ch in "/\\.")
    if looks_like_path:
        raise InputError(f"{name_or_path}: no such dataset file")
    try:
        SUITES.get(name_or_path)
    except UnknownNameError as exc:
        raise InputError(f"{exc} — or give a path to a .jsonl/.csv/.parquet file") from None
    raise AssertionError("unreachable")
