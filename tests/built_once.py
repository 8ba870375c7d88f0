"""Folders that the test run builds once, whether the tests run in one process or in pytest-xdist's many."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object] = lambda _: None
) -> Path:
    """A folder ``name`` that ``build`` fills once for the whole test run: in the one process, or, under
    pytest-xdist, in the first worker to ask (the others wait on a file lock, then read it). A build
    that fails leaves nothing behind for the next one to trust."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return folder
    root = tmp_path_factory.getbasetemp().parent  # shared by this run's workers
    folder, done = root / name, root / f"{name}.built"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder
