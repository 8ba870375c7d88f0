"""Lines for the person at the terminal: ``sago: text`` on stderr, flushed at once (progress in logs)."""

from __future__ import annotations

from typing import Any


def progress_line(file: Any, text: str) -> None:
    """One progress line, ``sago: text``, on ``file`` (default stderr), flushed at once."""
    import sys

    print(f"sago: {text}", file=file if file is not None else sys.stderr, flush=True)
