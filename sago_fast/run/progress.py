"""What a run shows while it works: on a terminal, tqdm's unit bar (naming the unit in progress), the
unit's examples bar (examples committed of its total, counting chunks committed before a resume) and one
bar per model pass below them; elsewhere (CI, ``make demo > log``) lines on stderr, one when a unit starts
and ends and at most one every ``interval`` seconds inside a pass (``prefill``, ``score``, ``generate``)
or for the examples committed."""

from __future__ import annotations

import time
from typing import Any

from sago_fast.runtime.progress import (
    LinePasses,
    NoProgress,
    PassProgress,
    TqdmPasses,
    on_terminal,
    progress_line,
)

LINE_INTERVAL_S = 30.0  # seconds between progress lines when stderr is not a terminal


class RunProgress:
    """mode: ``bars`` (terminal), ``lines`` (not a terminal) or ``off``. done: units already finished."""

    def __init__(
        self, total: int, done: int, mode: str, *, interval: float = LINE_INTERVAL_S, file: Any = None
    ):
        self.total, self.done, self.mode = total, done, mode
        self.started = done  # units started (more than done + 1 while models advance in lockstep)
        self.interval = interval
        self.file = file
        self._bar: Any = None
        self._examples: Any = None
        self._examples_of = ""
        self._last_line = 0.0
        self._started = time.monotonic()
        self._number: dict[str, int] = {}  # unit id -> its number among the run's units (when started)
        self._committed: dict[str, tuple[int, int]] = {}  # unit id -> (examples committed, its total)
        if mode == "bars":
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=done, desc="sago run", unit="unit", file=file)

    @classmethod
    def choose(cls, total: int, done: int, enabled: bool) -> RunProgress:
        return cls(total, done, "off" if not enabled else "bars" if on_terminal() else "lines")

    def unit_started(self, label: str, unit_id: str = "") -> PassProgress:
        """A unit begins: the bar names it; returns what its model passes report to."""
        self.started += 1
        self._number[unit_id or label] = self.started
        if self.mode == "bars":
            self._bar.set_postfix_str(label[-60:])
            return TqdmPasses(label, file=self.file)
        if self.mode == "lines":
            progress_line(self.file, f"unit {self.started}/{self.total} started: {label}")
            return LinePasses(label, self.interval, file=self.file)
        return NoProgress()

    def examples(self, label: str, done: int, total: int, unit_id: str = "") -> None:
        """A chunk of unit ``label`` is committed: ``done`` of its ``total`` examples are."""
        self._committed[unit_id or label] = (done, total)
        if self.mode == "bars":
            from tqdm import tqdm

            if self._examples is None or self._examples_of != label:
                if self._examples is not None:
                    self._examples.close()
                self._examples = tqdm(total=total, desc="examples", unit="ex", file=self.file, leave=False)
                self._examples_of = label
            self._examples.update(done - self._examples.n)
        elif self.mode == "lines":
            now = time.monotonic()
            if done >= total or now - self._last_line >= self.interval:
                self._last_line = now
                progress_line(
                    self.file,
                    f"unit {self._unit_number(unit_id or label)}/{self.total} {label}: {done}/{total} examples committed",
                )

    def unit_finished(self, label: str, error: str | None, seconds: float, unit_id: str = "") -> None:
        number = self._unit_number(unit_id or label)
        if self._examples is not None:
            self._examples.close()
            self._examples = None
        self.done += 1
        if self.mode == "bars":
            self._bar.update(1)
        elif self.mode == "lines":
            how = f"failed ({error})" if error else f"done in {seconds:.1f} s"
            committed = self._committed.pop(unit_id or label, None)
            examples = "" if committed is None else f", {committed[0]}/{committed[1]} examples"
            progress_line(
                self.file,
                f"unit {number}/{self.total} {how}: {label}{examples} "
                f"({time.monotonic() - self._started:.0f} s since the run started)",
            )

    def elsewhere(self, label: str, why: str, unit_id: str = "") -> None:
        """A unit is left to another process (it is running there, or done): counted as done here."""
        self.done += 1
        if self.mode == "bars":
            self._bar.update(1)
        elif self.mode == "lines":
            progress_line(self.file, f"unit left to another process ({why}): {label}")

    def _unit_number(self, key: str) -> int:
        """The unit's number among the run's units: in the order they started (several are in progress
        at once when models advance in lockstep)."""
        return self._number.get(key, self.done + 1)

    def close(self) -> None:
        if self._examples is not None:
            self._examples.close()
            self._examples = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None
