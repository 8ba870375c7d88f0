"""lm-eval's task index, built once: within a command for many checkpoints, and across commands for the
task YAMLs lm-eval ships.

Every lm-eval run builds a ``TaskManager``, which parses every task YAML it ships (~14,000 files, ~4-5 s on
2 cores) and those of ``--include_path`` into an index of task names. While :func:`task_index_reused` is
open, lm-eval's ``TaskIndex.build``:

- returns a copy of an index already built in this process for the same folders (many checkpoints in one
  ``sago lm-eval`` or :func:`sago_fast.lmeval.each.evaluate_each`);
- reads the shipped folder's part from ``$SAGO_CACHE_DIR/lmeval-index/<key>.pickle``, where the key hashes
  lm-eval's version, Python's, and the path, size and modification time of every shipped YAML, so an
  upgrade or an edit builds it again. It is written to a temporary name and renamed (:mod:`sago_fast.atomic`;
  commands that build it at the same time write the same bytes).

``--include_path`` folders are always parsed afresh (users edit them) and override shipped tasks of the
same name, as lm-eval's own merge does.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sago_fast.atomic import atomic_path
from sago_fast.paths import cache_root

log = logging.getLogger(__name__)

INDEX_FOLDER = "lmeval-index"


def shipped_tasks_folder() -> Path:
    """The folder of the task YAMLs lm-eval ships (its ``include_defaults``)."""
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).parent


def _signature(folder: Path, resolve_includes: bool) -> str:
    """What the shipped index depends on: lm-eval's and Python's versions, and each YAML's path, size and
    modification time (lm-eval's own walk, so the same files)."""
    import lm_eval
    from lm_eval.tasks._index import TaskIndex

    digest = hashlib.sha256()
    digest.update(f"{lm_eval.__version__}|{sys.version_info[:2]}|{resolve_includes}|{folder}".encode())
    for path in TaskIndex._iter_yaml_files(folder):
        stat = path.stat()
        digest.update(f"\n{path.relative_to(folder)}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:32]


def _stored_index(build: Any, folder: Path, resolve_includes: bool, store: Path) -> dict[str, Any]:
    """The index of ``folder`` from ``store`` when its signature matches, else built and stored."""
    file = store / f"{_signature(folder, resolve_includes)}.pickle"
    try:
        with file.open("rb") as handle:
            index: dict[str, Any] = pickle.load(handle)
        return index
    except FileNotFoundError:
        pass
    except Exception as exc:  # unreadable: built again and replaced
        log.warning("lm-eval task index %s unreadable (%s): building it again", file, exc)
    index = build([folder], resolve_includes=resolve_includes)
    try:
        with atomic_path(file) as temporary, temporary.open("wb") as out:
            pickle.dump(index, out, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError as exc:  # a read-only cache: this command still has its index
        log.warning("lm-eval task index not stored in %s: %s", store, exc)
    return index


@contextmanager
def task_index_reused(store: Path | None = None) -> Iterator[None]:
    """lm-eval's ``TaskIndex.build`` reusing what was built (module docstring) while open; ``store``: where
    the shipped index is kept (default ``$SAGO_CACHE_DIR/lmeval-index``). Put back on exit."""
    from lm_eval.tasks._index import TaskIndex

    build = TaskIndex.__dict__["build"]  # the staticmethod itself, put back afterwards
    original = build.__func__
    folder_of_store = store or cache_root() / INDEX_FOLDER
    built: dict[tuple[Any, ...], dict[str, Any]] = {}

    def build_reusing(paths: Iterable[Path], *, resolve_includes: bool = True) -> dict[str, Any]:
        paths = [Path(p) for p in paths]
        key = (tuple(str(p) for p in paths), resolve_includes)
        if key not in built:
            shipped = shipped_tasks_folder()
            if paths and paths[0].resolve() == shipped.resolve():
                index = dict(_stored_index(original, paths[0], resolve_includes, folder_of_store))
                for name, entry in original(paths[1:], resolve_includes=resolve_includes).items():
                    if name in index:  # lm-eval's merge: later folders override, with its warning
                        log.warning(
                            "Task '%s' from %s overrides existing task from %s",
                            name,
                            entry.yaml_path,
                            index[name].yaml_path,
                        )
                    index[name] = entry
                built[key] = index
            else:
                built[key] = original(paths, resolve_includes=resolve_includes)
        return dict(built[key])

    TaskIndex.build = staticmethod(build_reusing)  # type: ignore[method-assign]
    try:
        yield
    finally:
        TaskIndex.build = build  # type: ignore[method-assign]
