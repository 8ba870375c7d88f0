"""Progress of the model passes inside one unit: items done / total and tokens per second per stage.

The model reports to a :class:`PassProgress` (``start`` when a pass begins with its item count,
``advance`` after every batch); :class:`TqdmPasses` draws one bar per pass, :class:`NoProgress` nothing.
"""

from __future__ import annotations

import time
from typing import Any, Protocol


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
