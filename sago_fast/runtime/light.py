"""Start-up without torch, for a process that only runs exports already in the cache.

transformers imports torch as soon as it is imported when torch is installed (~4.5 s of the ~6 s that
loading a tokenizer took on a 2-core machine; 1.3 s without it). A command that finds its export in the
cache needs transformers for the tokenizer only, so it can tell transformers not to use torch. That choice
holds for the whole process (transformers reads it once), so it is made only by commands that export
nothing afterwards, and only when transformers is not imported yet.
"""

from __future__ import annotations

import os
import sys


def tokenizers_without_torch() -> bool:
    """Ask transformers (not imported yet) to leave torch alone; returns whether the choice was made."""
    if "transformers" in sys.modules or "torch" in sys.modules:
        return False
    os.environ["USE_TORCH"] = "0"
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")  # "None of PyTorch ... found"
    return True
