"""Where sago_fast keeps what it builds once and reuses: ``$SAGO_CACHE_DIR`` or ``~/.cache/sago_fast``."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The cache root: exports live in its ``exports/`` folder, converted GGUF files in ``gguf/``."""
    return Path(os.environ.get("SAGO_CACHE_DIR") or Path.home() / ".cache" / "sago_fast")


def check_cache_writable(cache_dir: str | os.PathLike[str] | None, flag: str = "--cache-dir") -> None:
    """Before any work: the export cache (``cache_dir``, set by ``flag``, else ``$SAGO_CACHE_DIR/exports``)
    and the cache root (converted GGUF files, compiled kernels) can be written, in one line naming the
    setting."""
    from sago_fast.atomic import check_writable

    root = cache_root()
    named = (
        "$SAGO_CACHE_DIR" if os.environ.get("SAGO_CACHE_DIR") else "the cache folder (set $SAGO_CACHE_DIR)"
    )
    if cache_dir is not None:
        check_writable(cache_dir, what=flag, directory=True)
    check_writable(root, what=named, directory=True)
