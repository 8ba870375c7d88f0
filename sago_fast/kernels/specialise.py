"""Drivers specialised per metric, so Numba caches them on disk and a new process compiles nothing.

Numba caches a jitted function that calls other jitted functions by name, but not one that receives them
as arguments (first-class functions get a new type in every process). So :mod:`.drivers` is a template
whose drivers call the globals ``kernel``, ``aux_fn`` and ``tiled_fn``; :func:`drivers_for` writes one copy
of it per metric, with those three imports pointing at the metric's functions, into
``$SAGO_CACHE_DIR/kernels/<key>/`` and imports it. ``<key>`` hashes the source of every kernel module,
Numba's and Python's versions: a changed kernel gets a new folder (Numba checks a cached entry only
against its own file, which here never changes), and Numba's own index keys each entry by the CPU it was
compiled for, so a cache moved to another machine recompiles instead of crashing.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from filelock import FileLock

from sago_fast.atomic import atomic_path
from sago_fast.paths import cache_root

log = logging.getLogger(__name__)

KERNELS_DIR = Path(__file__).parent
TEMPLATE = KERNELS_DIR / "drivers.py"
MARKER = "# SPECIALISE: "


def _key() -> str:
    """Hash of every kernel module's source and of the compilers that read it."""
    import numba

    digest = hashlib.sha256(f"{numba.__version__}\0{sys.version}\0".encode())
    for file in sorted(KERNELS_DIR.glob("*.py")):
        digest.update(file.name.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def _import_line(function: Any, alias: str) -> str:
    if function is None:
        return f"{alias} = None  {MARKER}{alias}"
    py_func = function.py_func
    return f"from {py_func.__module__} import {py_func.__name__} as {alias}  {MARKER}{alias}"


def specialised_source(kernel: Any, aux: Any, tiled: Any) -> str:
    """The template with its three ``# SPECIALISE`` imports pointing at these jitted functions."""
    replace = {"kernel": kernel, "aux": aux, "tiled": tiled}
    aliases = {"kernel": "kernel", "aux": "aux_fn", "tiled": "tiled_fn"}
    lines = []
    for line in TEMPLATE.read_text(encoding="utf-8").splitlines():
        if MARKER in line:
            role = line.split(MARKER, 1)[1].strip()
            line = _import_line(replace[role], aliases[role])
        lines.append(line)
    return "\n".join(lines) + "\n"


def _folder() -> Path:
    """Where the specialised copies live: the cache root, or a per-user temp folder if it is read-only."""
    for root in (cache_root() / "kernels", Path(tempfile.gettempdir()) / f"sago_fast-kernels-{os.getuid()}"):
        folder = root / _key()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if os.access(folder, os.W_OK):
                return folder
        except OSError:
            continue
    raise OSError("no writable folder for the specialised kernel drivers")


@functools.cache
def drivers_for(name: str, kernel: Any, aux: Any, tiled: Any) -> ModuleType:
    """The drivers of metric ``name`` (its pair ``kernel``, per-row ``aux``, whole-example ``tiled`` form
    or None), as a module whose jitted functions Numba caches beside it. Written once (under a lock, never
    rewritten: a new modification time would invalidate Numba's cache), imported once per process."""
    folder = _folder()
    path = folder / f"drivers_{name}.py"
    if not path.is_file():
        with FileLock(str(folder / f".{name}.lock")):
            if not path.is_file():
                with atomic_path(path) as tmp:
                    tmp.write_text(specialised_source(kernel, aux, tiled), encoding="utf-8")
                log.debug("specialised drivers of %s -> %s", name, path)
    module_name = f"sago_fast_kernels_{folder.name}_{name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # Numba's parallel backend looks functions up by module name
    spec.loader.exec_module(module)
    return module
