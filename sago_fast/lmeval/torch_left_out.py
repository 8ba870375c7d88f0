"""torch left out of a ``sago lm-eval`` command that does not need it: lm-eval's torch seed and the torch
part of its environment report.

lm-eval imports torch in every run, whatever the model: to seed it (``set_torch_seed``, before the model is
made) and for its environment report (``add_env_info`` calls torch's ``collect_env``). The sago backend
runs ONNX Runtime, and with every export cached nothing else in the command imports torch
(:mod:`sago_fast.runtime.light`): on the 2-core development machine a ``--limit 1`` command of 200 real
MMLU items takes 2.9 s with torch left out, 4.5 s with it.

While :func:`torch_left_out` is open and torch is not imported:

- lm-eval's torch seed is applied when torch is imported, if it ever is (a filter or a metric that uses
  it): the generator then holds the state that seeding it at the start gives, since nothing drew from it
  before.
- the report's torch part (torch's own ``get_pretty_env_info``) is gathered by a child process started on
  entry, at low priority, on the core that lm-eval's single-threaded start leaves free; the report waits
  for it. Where the child fails, the report is gathered here as lm-eval does (importing torch).

Once torch is imported in this process, seed and report are lm-eval's own.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import subprocess
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

COLLECT_ENV = "torch.utils.collect_env"
# the child: torch's own report, at low priority (it must not slow the passes if it is still running)
REPORT_COMMAND = (
    "import os, sys\n"
    "if hasattr(os, 'nice'):\n    os.nice(10)\n"
    "from torch.utils.collect_env import get_pretty_env_info\n"
    "sys.stdout.write(get_pretty_env_info())\n"
)
REPORT_TIMEOUT_S = 120.0


class SeedWhenImported(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` finder that seeds torch's generator right after ``import torch`` has run, and
    then leaves ``sys.meta_path``. ``seed``: the latest seed asked for. A look-up that imports nothing
    (``importlib.util.find_spec("torch")``, as lm-eval's ``is_torch_available``) changes nothing: only the
    loader of a spec that is executed seeds."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._finding = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch" or self._finding:
            return None
        self._finding = True
        try:
            spec = importlib.util.find_spec("torch")  # the other finders' answer
        finally:
            self._finding = False
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            run_module(module)
            self.remove()
            module.manual_seed(self.seed)
            log.debug("torch imported: seeded with %d", self.seed)

        # this spec's loader only: a look-up's spec that is never executed seeds nothing
        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def start_report() -> subprocess.Popen[str] | None:
    """The child process that writes torch's environment report to its stdout; None where it cannot
    start."""
    try:
        return subprocess.Popen(
            [sys.executable, "-c", REPORT_COMMAND],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
        )
    except OSError as exc:
        log.debug("torch's environment report left to lm-eval: %s", exc)
        return None


def report_of(child: subprocess.Popen[str] | None) -> str | None:
    """The child's report, or None where it failed or took longer than ``REPORT_TIMEOUT_S``."""
    if child is None:
        return None
    try:
        out, _ = child.communicate(timeout=REPORT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return None
    return out if child.returncode == 0 else None


@contextmanager
def collect_env_answering(report: str) -> Iterator[None]:
    """While open, ``from torch.utils.collect_env import get_pretty_env_info`` gives ``report`` without
    importing torch (a module of that name in ``sys.modules``; Python looks a dotted name up there before
    importing its parents)."""
    stand_in = types.ModuleType(COLLECT_ENV)
    stand_in.get_pretty_env_info = lambda: report  # type: ignore[attr-defined]
    sys.modules[COLLECT_ENV] = stand_in
    try:
        yield
    finally:
        if sys.modules.get(COLLECT_ENV) is stand_in:
            del sys.modules[COLLECT_ENV]


@contextmanager
def torch_left_out() -> Iterator[None]:
    """lm-eval's torch seed applied on torch's import and its report's torch part from a child process
    (module docstring), while open; put back on exit. Nothing changes where torch is imported already."""
    import lm_eval.evaluator as evaluator

    if "torch" in sys.modules:
        yield
        return
    child = start_report()
    finder = SeedWhenImported(0)  # on sys.meta_path from lm-eval's first seeding until torch's import
    original_seed: Callable[[int], None] = evaluator.set_torch_seed
    original_report: Callable[[dict[str, Any]], None] = evaluator.add_env_info
    childs_report = functools.cache(lambda: report_of(child))

    def set_torch_seed(seed: int) -> None:
        if "torch" in sys.modules:
            original_seed(seed)
            return
        finder.seed = seed
        if finder not in sys.meta_path:
            sys.meta_path.insert(0, finder)

    def add_env_info(storage: dict[str, Any]) -> None:
        report = None if "torch" in sys.modules else childs_report()
        if report is None:
            original_report(storage)
            return
        with collect_env_answering(report):
            original_report(storage)

    evaluator.set_torch_seed = set_torch_seed
    evaluator.add_env_info = add_env_info
    try:
        yield
    finally:
        evaluator.set_torch_seed = original_seed
        evaluator.add_env_info = original_report
        finder.remove()
        if child is not None:
            if child.poll() is None:
                child.kill()
            child.communicate()
