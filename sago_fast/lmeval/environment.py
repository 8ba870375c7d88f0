"""lm-eval's environment report, gathered once for the many runs of one command.

Every ``simple_evaluate`` adds an environment report to its results (``add_env_info``): torch's
``collect_env`` runs ``pip list`` and a few other programs (~0.2 s on 2 cores), and a git lookup of the
folder above. Within one command nothing of it changes between checkpoints, so while
:func:`environment_report_reused` is open the first run's report is copied into the others' results. The
programs it runs say nothing on the terminal (``git`` outside a repository would).
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

    from sago_fast.runtime.session import native_stderr_silenced

    original, git_hash = evaluator.add_env_info, evaluator.get_git_commit_hash
    gathered: dict[str, Any] = {}

    def add_env_info_once(storage: dict[str, Any]) -> None:
        if not gathered:
            with native_stderr_silenced():  # `git` outside a repository says so on stderr: noise here
                original(gathered)
        storage.update(copy.deepcopy(gathered))

    def quiet_git_hash() -> Any:
        with native_stderr_silenced():
            return git_hash()

    evaluator.add_env_info, evaluator.get_git_commit_hash = add_env_info_once, quiet_git_hash
    try:
        yield
    finally:
        evaluator.add_env_info, evaluator.get_git_commit_hash = original, git_hash
