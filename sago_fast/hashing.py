"""Content hashes of files, read in chunks (checkpoints, GGUF files and data files are hashed alike)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

CHUNK = 8 << 20


def update_with_file(digest: Any, path: Path) -> None:
    """Feed ``path``'s bytes to a hashlib ``digest``, without holding the file in memory."""
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    update_with_file(digest, path)
    return digest.hexdigest()
