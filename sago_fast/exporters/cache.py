"""Export cache: one directory per (checkpoint content, export settings, library versions).

Entries are written under a temporary name and renamed into place, under a file lock, so two processes
exporting the same checkpoint do the work once and nobody ever sees a half-written entry.

A checkpoint whose architecture and config match an exported one (its *graph signature*, see
:mod:`sago_fast.exporters.reweight`) is not exported again: its entry holds the shared graph's structure
pointing at its own safetensors files (hard-linked into the entry), its config and tokenizer, and names
the entry it took the graph from (``graph_from``). ``graphs/<signature>`` names the entry that holds each
exported graph.
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

from sago_fast.atomic import atomic_path, usual_mode
from sago_fast.checkpoints.resolve import Checkpoint
from sago_fast.errors import ExportError
from sago_fast.exporters.export import (
    FORMAT_VERSION,
    MANIFEST_FILE,
    copy_model_files,
    eos_token_ids,
    export_checkpoint,
)
from sago_fast.exporters.optimised_graph import is_session_cache, write_for_sibling
from sago_fast.exporters.reweight import graph_signature, sibling_fits, write_sibling_graph
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


GRAPHS_DIR = "graphs"


@dataclass(frozen=True)
class ExportedModel:
    """A complete export directory and its manifest."""

    path: Path
    manifest: dict[str, Any]
    reused: bool  # True when the entry was already in the cache

    @property
    def model_path(self) -> Path:
        """The entry's graph (``model.onnx``)."""
        return self.path / self.manifest["files"]["model"]

    @property
    def reweighted(self) -> bool:
        """The graph was not exported for this checkpoint but taken from a sibling's (``graph_from``)."""
        return self.manifest.get("graph_from") is not None


def _read_entry(path: Path, say: bool = True) -> dict[str, Any] | None:
    """The manifest of a complete, undamaged entry; None otherwise (a damaged one is logged when ``say``:
    one look of the several a command takes at an entry says it, so it is said once)."""
    warn = log.warning if say else log.debug
    manifest = _read_manifest(path, warn)
    if manifest is None or not (path / manifest["files"]["model"]).is_file():
        return None
    for name, size in manifest.get("file_bytes", {}).items():
        actual = (path / name).stat().st_size if (path / name).is_file() else -1
        if actual != size:
            warn(
                "export cache entry %s: %s has %d bytes, its manifest says %d (damaged); exporting again",
                path,
                name,
                actual,
                size,
            )
            return None
    for name, mtime in manifest.get("linked", {}).items():  # the checkpoint's own file, changed in place?
        if (path / name).stat().st_mtime_ns != mtime:
            warn(
                "export cache entry %s: %s (a link to the checkpoint's file) changed after it was cached; "
                "re-weighting again",
                path,
                name,
            )
            return None
    return manifest


def _finished(path: Path, say: bool = True) -> ExportedModel | None:
    """The complete entry at ``path`` (reused), or None."""
    manifest = _read_entry(path, say)
    return None if manifest is None else ExportedModel(path, manifest, reused=True)


def _read_manifest(path: Path, warn: Any = log.warning) -> dict[str, Any] | None:
    """An entry's manifest; None when it has none, or an unreadable one (logged)."""
    manifest_file = path / MANIFEST_FILE
    if not manifest_file.is_file():
        return None
    try:
        return json.loads(manifest_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        warn("export cache entry %s: unreadable manifest; exporting again", path)
        return None


class ExportCache:
    """``get_or_export`` is the only way in: it returns a complete entry or raises, leaving nothing behind."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()

    def entry_path(self, key: str) -> Path:
        return self.root / key

    def lookup(
        self, checkpoint: Checkpoint, settings: ExportSettings = ExportSettings()
    ) -> ExportedModel | None:
        """The finished entry of ``checkpoint``, or None (nothing is exported; a damaged entry is said
        when :meth:`get_or_export` meets it)."""
        return _finished(self.entry_path(export_key(checkpoint, settings)), say=False)

    def get_or_export(
        self, checkpoint: Checkpoint, settings: ExportSettings = ExportSettings(), *, reweight: bool = True
    ) -> ExportedModel:
        """The entry of ``checkpoint``; exported when absent, or sharing the graph of an exported sibling
        (same graph signature) when ``reweight`` and the sibling's graph allows it."""
        if checkpoint.base is not None:  # a LoRA adapter
            raise ExportError(
                f"{checkpoint.path}: a LoRA adapter is not exported; it runs over its base's export "
                f"({checkpoint.base.display_path})"
            )
        key = export_key(checkpoint, settings)
        final = self.entry_path(key)
        found = _finished(final)
        if found is not None:
            return found
        self.root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.root / f"{key}.lock")):
            found = _finished(final, say=False)  # another process may have finished while we waited
            if found is not None:
                return found
            signature = graph_signature(checkpoint, settings, FORMAT_VERSION, versions_of(KEYED_PACKAGES))
            base = self._graph_entry(signature) if reweight else None
            tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=self.root))
            try:
                if base is not None and sibling_fits(checkpoint, base[1]["reweight"]):
                    manifest = _sibling_entry(checkpoint, tmp, base, key, self.root)
                    log.info(
                        "%s shares the graph of %s (re-weighted, not exported)", checkpoint.path, base[0]
                    )
                else:
                    manifest = export_checkpoint(checkpoint, tmp, settings, key)
                if final.exists():  # a stale, incomplete entry from an older version
                    shutil.rmtree(final)
                os.replace(tmp, final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            if manifest.get("graph_from") is None and manifest.get("reweight"):
                self._record_graph(signature, key)
        log.info("cached %s -> %s", checkpoint.path, final)
        return ExportedModel(final, manifest, reused=False)

    def _graph_entry(self, signature: str) -> tuple[str, dict[str, Any]] | None:
        """(key, manifest) of the entry holding the graph of ``signature``, if it is complete."""
        index = self.root / GRAPHS_DIR / signature
        if not index.is_file():
            return None
        key = index.read_text(encoding="utf-8").strip()
        manifest = _read_entry(self.entry_path(key), say=False)
        if manifest is None or manifest.get("graph_from") is not None or not manifest.get("reweight"):
            return None
        return key, manifest

    def _record_graph(self, signature: str, key: str) -> None:
        with atomic_path(self.root / GRAPHS_DIR / signature) as tmp:
            tmp.write_text(key, encoding="utf-8")


def _sibling_entry(
    checkpoint: Checkpoint, out_dir: Path, base: tuple[str, dict[str, Any]], key: str, root: Path
) -> dict[str, Any]:
    """The entry of a checkpoint that shares ``base``'s graph: the graph pointing at the checkpoint's own
    safetensors files (see :func:`~sago_fast.exporters.reweight.write_sibling_graph`), manifest, config
    and tokenizer files."""
    base_key, base_manifest = base
    written = write_sibling_graph(
        root / base_key / base_manifest["files"]["model"],
        checkpoint.path,
        base_manifest["reweight"]["names"],
        base_manifest["dtype"],
        out_dir,
    )
    write_for_sibling(
        root / base_key / base_manifest["files"]["model"], out_dir / base_manifest["files"]["model"]
    )
    copy_model_files(checkpoint.path, out_dir)
    manifest = {
        **base_manifest,
        "key": key,
        "checkpoint": str(checkpoint.path),
        "content_hash": checkpoint.content_hash,
        "eos_token_ids": eos_token_ids(checkpoint.path),
        "graph_from": base_key,
        **written,
    }
    (out_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return manifest


def copy_export(exported: ExportedModel, out_dir: Path) -> Path:
    """Place a complete, standalone copy of an export at ``out_dir``, atomically.

    Files are copied, never hard-linked: ``onnx.load`` (1.23 and later) refuses external data in a file
    with more than one link, and a copy outlives ``sago cache`` clean-ups and edits of the checkpoint."""
    out_dir = out_dir.expanduser()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        for item in exported.path.iterdir():  # a re-weighted entry is self-contained too
            if not is_session_cache(item):  # ONNX Runtime's, for this machine's sessions
                shutil.copy2(item, tmp / item.name)
                if (tmp / item.name).is_file():  # the exporter writes some files 0600: a copy gets the usual
                    usual_mode(tmp / item.name)
        if out_dir.exists():
            if not (out_dir / MANIFEST_FILE).is_file() and any(out_dir.iterdir()):
                raise ExportError(f"{out_dir}: exists and is not a sago export; refusing to overwrite")
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir
