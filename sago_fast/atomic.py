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


def usual_mode(path: Path) -> None:
    """Give the file ``path`` the permissions a new file of this process gets (0666 less the umask)."""
    path.chmod(0o666 & ~_UMASK)


@contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success it replaces ``target``, on error it is removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    usual_mode(tmp)  # mkstemp creates 0600; the result should get the usual permissions
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def check_writable(target: str | os.PathLike[str], *, what: str, directory: bool = False) -> None:
    """Fail now, in one line naming ``what`` (the user's flag), when ``target`` could not be written:
    checked before any work starts, so a long job never ends in an unwritable path and a lost result.

    The nearest existing folder on the way to ``target`` (``target`` itself for an existing folder) must
    be a folder in which a file can be created; a probe file is made and removed there, which also
    catches read-only file systems that permission bits do not show. Nothing else is created."""
    from sago_fast.errors import InputError

    target = Path(target)
    if target.exists() and not directory and target.is_dir():
        raise InputError(f"{what} {target}: is a folder, not a file")
    if target.exists() and directory and not target.is_dir():
        raise InputError(f"{what} {target}: is a file, not a folder")
    if target.is_file() and not os.access(target, os.W_OK):
        raise InputError(f"{what} {target}: the file is read-only (no write permission for this user)")
    folder = target if directory and target.is_dir() else target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise InputError(f"{what} {target}: {folder} is not a folder")
    try:
        fd, name = tempfile.mkstemp(prefix=".sago-write-check.", dir=folder)
    except OSError as exc:
        raise InputError(f"{what} {target}: cannot write in {folder} ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(name)


DISK_FULL_MARKERS = ("no space left", "file too large", "disk full", "enospc", "efbig")


def is_disk_full(exc: BaseException) -> bool:
    """Whether a write failed for want of space (ENOSPC) or by the file size limit (EFBIG)."""
    import errno

    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EFBIG):
        return True
    return any(marker in str(exc).lower() for marker in DISK_FULL_MARKERS)
