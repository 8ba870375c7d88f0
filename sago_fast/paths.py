"""Where sago_fast keeps what it builds once and reuses: ``$SAGO_CACHE_DIR`` or ``~/.cache/sago_fast``."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The cache root: exports live in its ``exports/`` folder, converted GGUF files in ``gguf/``."""
    return Path(os.environ.get("SAGO_CACHE_DIR") or Path.home() / ".cache" / "sago_fast")
