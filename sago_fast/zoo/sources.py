"""Where a zoo comes from: the package, the shared zoo cache, or training.

The default zoo (``ZooConfig()``) is shipped in the package (``sago_fast/zoo/shipped``, 6.7 MB): its
checkpoints are the same bytes on every machine, so ``sago demo`` prints the same table everywhere. Training
is chaotic and MKL/ATen take other code paths on other CPU vendors, so a zoo trained here is reproducible
on this machine, not across machines. Any other configuration (or ``train=True``) is trained once into the
shared zoo cache, ``$SAGO_CACHE_DIR/zoo/<config key>``, under a file lock, and reused by every command and
output folder that asks for the same configuration (``sago zoo``, ``sago demo --out X``).

A command's own folder (``<out>/zoo``) gets a copy of the checkpoints, so paths like
``sago_out/demo/zoo/step-01200`` work as written; a folder whose ``zoo.json`` already names the
configuration is kept as it is.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from sago_fast.paths import cache_root
from sago_fast.zoo.train import ZOO_FILE, ZooConfig, ZooResult, read_zoo, train_zoo

log = logging.getLogger(__name__)

SHIPPED = Path(__file__).parent / "shipped"


def shipped_zoo(config: ZooConfig) -> tuple[Path, ...] | None:
    """The package's checkpoints when ``config`` is the configuration they were trained with."""
    return read_zoo(SHIPPED, config)


def shared_zoo(
    config: ZooConfig = ZooConfig(), *, train: bool = False, cache_dir: str | os.PathLike[str] | None = None
) -> ZooResult:
    """The zoo of ``config``: shipped, else the shared cache's, else trained into it (once, under a lock).

    train: train a reproduction even where the package ships this zoo (into the cache; kept and reused
    afterwards like any trained zoo). cache_dir: the zoo cache (default ``$SAGO_CACHE_DIR/zoo``)."""
    shipped = None if train else shipped_zoo(config)
    if shipped is not None:
        return ZooResult(SHIPPED, shipped, reused=True, source="shipped")
    from filelock import FileLock

    root = Path(cache_dir) if cache_dir is not None else cache_root() / "zoo"
    folder = root / config.key()
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f"{config.key()}.lock")):
        cached = read_zoo(folder, config)
        if cached is not None:
            return ZooResult(folder, cached, reused=True, source="cache")
        log.info("training zoo %s into %s", config.key(), folder)
        return train_zoo(folder, config)


def build_zoo(
    out_dir: str | os.PathLike[str],
    config: ZooConfig = ZooConfig(),
    *,
    train: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
) -> ZooResult:
    """The zoo of ``config`` in ``out_dir``: kept when its ``zoo.json`` already names ``config`` (and,
    where the package ships that zoo, says it is the shipped one), else copied from :func:`shared_zoo`
    (written under a temporary name, then renamed)."""
    out = Path(out_dir)
    if not train:
        present = read_zoo(out, config)
        # a zoo trained here by an older version has the default key too: the shipped one replaces it
        if present is not None and (_source_of(out) == "shipped" or shipped_zoo(config) is None):
            return ZooResult(out, present, reused=True, source=_source_of(out))
    source = shared_zoo(config, train=train, cache_dir=cache_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for checkpoint in source.checkpoints:
            shutil.copytree(checkpoint, tmp / checkpoint.name)
        manifest = json.loads((source.root / ZOO_FILE).read_text(encoding="utf-8"))
        manifest["source"] = source.source
        (tmp / ZOO_FILE).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ZooResult(
        out, tuple(out / p.name for p in source.checkpoints), reused=source.reused, source=source.source
    )


def _source_of(folder: Path) -> str:
    try:
        return str(json.loads((folder / ZOO_FILE).read_text(encoding="utf-8")).get("source", "cache"))
    except (OSError, ValueError):
        return "cache"
