"""Start-up without torch, for a process that only runs exports already in the cache.

transformers imports torch as soon as it is imported when torch is installed (~4.5 s of the ~6 s that
loading a tokenizer took on a 2-core machine; 1.3 s without it). A command that finds its exports in the
cache needs transformers for the tokenizer only, so it can tell transformers not to use torch. That choice
holds for the whole process (transformers reads it once), so it is made only by commands that export
nothing afterwards (the CLI's), and only when transformers is not imported yet.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sago_fast.checkpoints.resolve import Checkpoint


def tokenizers_without_torch() -> bool:
    """Ask transformers (not imported yet) to leave torch alone; returns whether the choice was made."""
    if "transformers" in sys.modules or "torch" in sys.modules:
        return False
    os.environ["USE_TORCH"] = "0"
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")  # "None of PyTorch ... found"
    return True


def start_without_torch_if_exported(
    checkpoints: Iterable[Checkpoint], device: str, cache_dir: str | os.PathLike[str] | None = None
) -> bool:
    """:func:`tokenizers_without_torch` when every checkpoint's export for the resolved ``device`` is in
    the cache (nothing will be exported); returns whether torch is left out."""
    from sago_fast.exporters.cache import ExportCache
    from sago_fast.types import ExportSettings

    cache, settings = ExportCache(cache_dir), ExportSettings.for_device(device)
    if any(cache.lookup(c.base or c, settings) is None for c in checkpoints):  # adapters: their base
        return False
    return tokenizers_without_torch()
