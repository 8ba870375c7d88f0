"""The sago backend's model arguments, checked and turned into sago's settings before lm-eval is imported
(``sago lm-eval`` checks them before lm-eval starts; the backend checks them again when lm-eval builds it)."""

from __future__ import annotations

import logging
import re

from sago_fast.errors import InputError

log = logging.getLogger(__name__)

DTYPES = {"float32": "fp32", "fp32": "fp32", "float16": "fp16", "fp16": "fp16", "half": "fp16"}


def sago_dtype(dtype: str | None) -> str | None:
    """lm-eval's ``dtype`` (``float32``, ``float16``, ``auto``) as sago's (``fp32``, ``fp16``, device default)."""
    if dtype is None or str(dtype) == "auto":
        return None
    try:
        return DTYPES[str(dtype)]
    except KeyError:
        raise InputError(
            f"model_args dtype={dtype}: the sago backend runs {', '.join(sorted(set(DTYPES)))} or auto"
        ) from None


def engine_device(device: str | None) -> str:
    """lm-eval's ``device`` as sago's: ``cuda``/``cuda:N`` is CUDA where it runs and else CPU with a
    warning (as lm-eval's ``hf`` backend does; lm-eval's own default is ``cuda:0``); ``cpu``; ``auto``."""
    from sago_fast.runtime.session import cuda_runs

    name = str(device or "cpu")
    if not name.startswith("cuda"):
        return name
    ok, reason = cuda_runs()
    if not ok:
        log.warning("device %s asked, but %s: running on CPU", name, reason)
    return "cuda" if ok else "cpu"


BATCH_SIZE = re.compile(r"auto(:\d+)?|[1-9]\d*")


def check_batch_size(value: str) -> None:
    """lm-eval's batch size for the sago backend: a whole number >= 1 (prompts per ORT call at most),
    ``auto`` or ``auto:N`` (sago's token budget); InputError (one line) before any work otherwise."""
    if not BATCH_SIZE.fullmatch(value.strip()):
        raise InputError(
            f"--batch_size {value!r}: the sago backend takes a whole number >= 1 (prompts per call at most), "
            "auto or auto:N (its own token budget)"
        )


def preflight(cache_dir: str | None, sago_db: str | None, batch_size: int | str | None) -> None:
    """What ``sago run`` checks before any work, for the backend's arguments: the export cache can be
    written, ``sago_db`` is a results file sago may write (not a foreign database), and the batch size
    is one the backend takes (one line naming the argument)."""
    from sago_fast.paths import check_cache_writable
    from sago_fast.store.store import check_results_file

    check_cache_writable(cache_dir, flag="model_args cache_dir")
    if sago_db:
        check_results_file(sago_db, "model_args sago_db")
    if batch_size is not None:
        check_batch_size(str(batch_size))
