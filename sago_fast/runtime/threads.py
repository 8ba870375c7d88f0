"""How many threads ONNX Runtime's sessions use where the caller does not say: ``$SAGO_THREADS``.

For processes that share a machine's cores (a test suite's workers, jobs on a shared node, a job whose
scheduler grants fewer cores than the machine has): the intra-op threads of one pass wait for the slowest
of them, so more threads than the cores a process really has make every pass slower, not faster
(lm-eval's ``hf`` on 12 MMLU items with one of two cores busy: 49.7 s on two threads, 25.5 s on one).
This module imports nothing heavy, so the CLI checks the variable before any work.
"""

from __future__ import annotations

import logging
import os

from sago_fast.errors import InputError

log = logging.getLogger(__name__)

THREADS_VARIABLE = "SAGO_THREADS"
MAX_THREADS = 1024  # ONNX Runtime takes a 32-bit count; no machine it runs on is helped by more


def default_threads() -> int:
    """``$SAGO_THREADS`` as ONNX Runtime's intra-op threads: an int >= 0; 0 or unset: 0, ORT's own choice
    (every physical core). InputError (one line) for anything else or above :data:`MAX_THREADS`."""
    given = os.environ.get(THREADS_VARIABLE, "").strip()
    if not given:
        return 0
    try:
        threads = int(given)
    except ValueError:
        threads = -1
    if not 0 <= threads <= MAX_THREADS:
        raise InputError(
            f"${THREADS_VARIABLE} must be a whole number of threads from 0 to {MAX_THREADS} (0: every core), "
            f"not {given!r}"
        )
    return threads


def check_threads() -> int:
    """:func:`default_threads`, with a warning when it is above the cores this process may use (every pass
    waits for its slowest thread); the CLI calls it once, before any work."""
    threads = default_threads()
    cores = usable_cores()
    if threads > cores:
        log.warning(
            "$%s=%d is more than the %d cores this process may use: every pass waits for its slowest thread, "
            "so runs get slower, not faster",
            THREADS_VARIABLE,
            threads,
            cores,
        )
    return threads


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system says it, else all)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1
