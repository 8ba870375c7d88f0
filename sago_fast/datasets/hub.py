"""``hf:ORG/NAME[:CONFIG][:SPLIT]``: a dataset through ``datasets.load_dataset``, read by the same readers.

The split defaults to ``test``. Records go through the SPEC schema when they have its fields (or the
``--field`` mapping), else through the one published format their shape matches (``formats.detect``).
Without network access (or with ``HF_HUB_OFFLINE=1``) this is one line saying so. A local folder of data
files works too (``hf:/path/to/folder:test``), which is how it is tested.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sago_fast.datasets.formats import detect, parse_records
from sago_fast.datasets.readers import FieldMap, parse_record, unique_examples
from sago_fast.errors import InputError
from sago_fast.types import Dataset

OFFLINE_MARKERS = ("offline", "couldn't reach", "connection", "name resolution", "max retries", "timed out")


def parse_spec(spec: str) -> tuple[str, str | None, str]:
    """``hf:org/name:config:split`` -> (name, config or None, split)."""
    parts = spec.removeprefix("hf:").split(":")
    if not parts[0] or len(parts) > 3:
        raise InputError(f"{spec}: expected hf:ORG/NAME[:CONFIG][:SPLIT]")
    name = parts[0]
    config = parts[1] or None if len(parts) > 1 else None
    split = parts[2] if len(parts) > 2 and parts[2] else "test"
    return name, config, split


def hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the Hugging Face hub cannot be reached (offline mode, no name resolution, no connection), or
    None. One connection attempt, at most ``timeout`` seconds: without it, ``datasets`` retries with
    back-off for ~30 s and prints a warning per retry before failing."""
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        return f"{host}: {exc.strerror or exc}"
    return None


def load_hub_dataset(spec: str, fields: FieldMap, limit: int | None) -> Any:
    from pathlib import Path

    name, config, split = parse_spec(spec)
    try:
        import datasets
    except ImportError:
        raise InputError(f"{spec}: hf: datasets need the `datasets` package (pip install datasets)") from None
    if not Path(name).exists():  # a hub id, not a local folder of data files
        reason = hub_unreachable()
        if reason is not None:
            raise InputError(
                f"{spec}: cannot reach the Hugging Face hub from this machine ({reason}); download the data "
                "and pass the file instead"
            )
    try:
        rows = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # datasets raises many types; offline ones are recognised by their text
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        if any(
            marker in str(exc).lower() or marker in type(exc).__name__.lower() for marker in OFFLINE_MARKERS
        ):
            raise InputError(
                f"{spec}: cannot reach the Hugging Face hub from this machine (offline); download the data "
                "and pass the file instead"
            ) from None
        raise InputError(f"{spec}: datasets.load_dataset failed ({type(exc).__name__}: {first})") from None
    if limit is not None:
        rows = rows.select(range(min(limit, len(rows))))
    records = [
        (f"{spec}[{i}]", f"{name.rstrip('/').split('/')[-1]}-{i}", dict(row)) for i, row in enumerate(rows)
    ]
    if not records:
        raise InputError(f"{spec}: no records in split {split!r}")
    fmt = detect(records[0][2])
    spec_fields = (fields.options, fields.prompt, fields.a)
    if fmt is not None and not any(field in records[0][2] for field in spec_fields):
        examples = parse_records(fmt, records, None, spec)
        reader = fmt
    else:
        examples = unique_examples(
            ((where, parse_record(record, fields, where)) for where, _, record in records), spec, fields.id
        )
        reader = "sago"
    digest = hashlib.sha256(json.dumps([r for _, _, r in records], sort_keys=True, default=str).encode())
    short = name.rstrip("/").split("/")[-1]
    return Dataset(
        f"{short}-{digest.hexdigest()[:12]}",
        short,
        spec,
        tuple(examples),
        reader,  # type: ignore[arg-type]
    )
