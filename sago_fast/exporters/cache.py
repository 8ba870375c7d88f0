"""Export cache: one directory per (checkpoint content, export settings, library versions).

Entries are written under a temporary name and renamed into place, under a file lock, so two processes
exporting the same checkpoint do the work once and nobody ever sees a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from sago_fast.checkpoints.resolve import Checkpoint
from sago_fast.errors import ExportError
from sago_fast.exporters.export import FORMAT_VERSION, MANIFEST_FILE, PROBE_FILE, export_checkpoint
from sago_fast.paths import cache_root
from sago_fast.runinfo import versions_of
from sago_fast.types import ExportSettings

log = logging.getLogger(__name__)

KEYED_PACKAGES = ("torch", "transformers", "optimum", "optimum-onnx", "onnx")


def default_cache_dir() -> Path:
    """``$SAGO_CACHE_DIR`` or ``~/.cache/sago_fast``; exports live in its ``exports/`` folder."""
    return cache_root() / "exports"


def export_key(checkpoint: Checkpoint, settings: ExportSettings) -> str:
    """Cache key: sha256 of the checkpoint content hash, export settings and exporter versions."""
    payload = {
        "content_hash": checkpoint.content_hash,
        "settings": asdict(settings),
        "format_version": FORMAT_VERSION,
        "versions": versions_of(KEYED_PACKAGES),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class ExportedModel:
    """A complete export directory and its manifest."""

    path: Path
    manifest: dict[str, Any]
    reused: bool  # True when the entry was already in the cache

    @property
    def probe_path(self) -> Path:
        return self.path / self.manifest["files"]["probe"]


def _read_entry(path: Path) -> dict[str, Any] | None:
    manifest_file = path / MANIFEST_FILE
    if not (manifest_file.is_file() and (path / PROBE_FILE).is_file()):
        return None
    return json.loads(manifest_file.read_text(encoding="utf-8"))


class ExportCache:
    """``get_or_export`` is the only way in: it returns a complete entry or raises, leaving nothing behind."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()

    def entry_path(self, key: str) -> Path:
        return self.root / key

    def get_or_export(
        self, checkpoint: Checkpoint, settings: ExportSettings = ExportSettings()
    ) -> ExportedModel:
        key = export_key(checkpoint, settings)
        final = self.entry_path(key)
        manifest = _read_entry(final)
        if manifest is not None:
            return ExportedModel(final, manifest, reused=True)
        self.root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.root / f"{key}.lock")):
            manifest = _read_entry(final)  # another process may have finished while we waited
            if manifest is not None:
                return ExportedModel(final, manifest, reused=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=self.root))
            try:
                manifest = export_checkpoint(checkpoint, tmp, settings, key)
                if final.exists():  # a stale, incomplete entry from an older version
                    shutil.rmtree(final)
                os.replace(tmp, final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        log.info("exported %s -> %s", checkpoint.path, final)
        return ExportedModel(final, manifest, reused=False)


def copy_export(exported: ExportedModel, out_dir: Path) -> Path:
    """Place a complete copy of an export at ``out_dir`` (hard links when possible), atomically."""
    out_dir = out_dir.expanduser()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        for item in exported.path.iterdir():
            target = tmp / item.name
            try:
                os.link(item, target)
            except OSError:
                shutil.copy2(item, target)
        if out_dir.exists():
            if not (out_dir / MANIFEST_FILE).is_file() and any(out_dir.iterdir()):
                raise ExportError(f"{out_dir}: exists and is not a sago export; refusing to overwrite")
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir
