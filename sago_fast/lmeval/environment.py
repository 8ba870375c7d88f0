"""lm-eval's environment report, gathered once for the many runs of one command.

Every ``simple_evaluate`` adds an environment report to its results (``add_env_info``): torch's
``collect_env`` runs ``pip list`` and a few other programs (~0.2 s on 2 cores), and a git lookup of the
folder above. Within one command nothing of it changes between checkpoints, so while
:func:`environment_report_reused` is open the first run's report is copied into the others' results.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def environment_report_reused() -> Iterator[None]:
    """lm-eval's ``add_env_info`` gathering its report once while open (module docstring); put back on
    exit. Each run still gets its own copy of the report."""
    import lm_eval.evaluator as evaluator

    original = evaluator.add_env_info
    gathered: dict[str, Any] = {}

    def add_env_info_once(storage: dict[str, Any]) -> None:
        if not gathered:
            original(gathered)
        storage.update(copy.deepcopy(gathered))

    evaluator.add_env_info = add_env_info_once
    try:
        yield
    finally:
        evaluator.add_env_info = original
