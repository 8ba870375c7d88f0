"""Write files under a temporary name and rename them into place: readers never see half a file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _process_umask() -> int:
    """The process's umask. Reading it means setting it, so this runs once, at import: setting and
    restoring it on every write would race when files are written from several threads (content-hash
    memos are), and could leave the process with a umask of 0."""
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


_UMASK = _process_umask()


@contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success it replaces ``target``, on error it is removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    tmp.chmod(0o666 & ~_UMASK)  # mkstemp creates 0600; the result should get the usual permissions
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
