"""Progress of the model passes inside one unit: items done / total and tokens per second per stage.

The model reports to a :class:`PassProgress` (``start`` when a pass begins with its item count,
``advance`` after every batch); :class:`TqdmPasses` draws one bar per pass, :class:`NoProgress` nothing.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from sago_fast.console import progress_line


class PassProgress(Protocol):
    def start(self, stage: str, total: int, unit: str) -> None:
        """A pass over ``total`` items (prompts, option pairs) begins."""

    def advance(self, n_items: int, n_tokens: int) -> None:
        """One batch of ``n_items`` items (``n_tokens`` tokens processed) is done."""

    def close(self) -> None:
        """The unit is finished (or failed)."""


class NoProgress:
    """Reports nowhere."""

    def start(self, stage: str, total: int, unit: str) -> None:
        return None

    def advance(self, n_items: int, n_tokens: int) -> None:
        return None

    def close(self) -> None:
        return None


class TqdmPasses:
    """One tqdm bar (below the run's unit bar) per pass: ``label stage: done/total [tok/s]``.

    disable: tqdm's rule (None: only on a terminal); file: where bars go (default stderr).
    """

    def __init__(self, label: str, disable: bool | None = None, position: int = 1, file: Any = None) -> None:
        self.label = label
        self.file = file
        self.disable = disable
        self.position = position
        self._bar: Any = None
        self._tokens = 0
        self._started = 0.0

    def start(self, stage: str, total: int, unit: str) -> None:
        from tqdm import tqdm

        self.close()
        self._tokens = 0
        self._started = time.perf_counter()
        self._bar = tqdm(
            total=total,
            desc=f"{self.label} {stage}",
            unit=unit,
            leave=False,
            position=self.position,
            disable=self.disable,
            file=self.file,
        )

    def advance(self, n_items: int, n_tokens: int) -> None:
        if self._bar is None:
            return
        self._tokens += n_tokens
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        self._bar.set_postfix_str(f"{self._tokens / elapsed:,.0f} tok/s", refresh=False)
        self._bar.update(n_items)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class LinePasses:
    """Progress for logs (stderr not a terminal: CI, ``make demo > log``): a line at most every ``interval``
    seconds while a pass runs: ``label stage: done/total units, tok/s, elapsed``."""

    def __init__(self, label: str, interval: float = 30.0, file: Any = None, clock: Any = time.monotonic):
        self.label = label
        self.interval = interval
        self.file = file
        self.clock = clock
        self._stage = ""
        self._unit = ""
        self._total = self._done = self._tokens = 0
        self._started = self._last = 0.0

    def start(self, stage: str, total: int, unit: str) -> None:
        self._stage, self._unit, self._total = stage, unit, total
        self._done = self._tokens = 0
        self._started = self._last = self.clock()

    def advance(self, n_items: int, n_tokens: int) -> None:
        self._done += n_items
        self._tokens += n_tokens
        now = self.clock()
        if now - self._last >= self.interval:
            self._last = now
            elapsed = max(now - self._started, 1e-9)
            progress_line(
                self.file,
                f"{self.label} {self._stage}: {self._done}/{self._total} {self._unit}s, "
                f"{self._tokens / elapsed:,.0f} tok/s, {elapsed:.0f} s",
            )

    def close(self) -> None:
        return None


def on_terminal() -> bool:
    """Whether progress can be drawn as bars (stderr is a terminal)."""
    import sys

    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
