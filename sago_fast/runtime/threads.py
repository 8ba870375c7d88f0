"""How many threads ONNX Runtime's sessions use where the caller does not say: ``$SAGO_THREADS``.

For processes that share a machine's cores (a test suite's workers, jobs on a shared node, a job whose
scheduler grants fewer cores than the machine has): the intra-op threads of one pass wait for the slowest
of them, so more threads than the cores a process really has make every pass slower, not faster
(lm-eval's ``hf`` on 12 MMLU items with one of two cores busy: 49.7 s on two threads, 25.5 s on one).
This module imports nothing heavy, so the CLI checks the variable before any work.
"""

from __future__ import annotations

import os

from sago_fast.errors import InputError

THREADS_VARIABLE = "SAGO_THREADS"


def default_threads() -> int:
    """``$SAGO_THREADS`` as ONNX Runtime's intra-op threads: an int >= 0; 0 or unset: 0, ORT's own choice
    (every physical core). InputError (one line) for anything else."""
    given = os.environ.get(THREADS_VARIABLE, "").strip()
    if not given:
        return 0
    try:
        threads = int(given)
    except ValueError:
        threads = -1
    if threads < 0:
        raise InputError(
            f"${THREADS_VARIABLE} must be a whole number of threads >= 0 (0: every core), not {given!r}"
        )
    return threads
