"""Safetensors headers: tensor names, shapes and byte ranges, read without reading the tensors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sago_fast.errors import CheckpointError


def safetensors_header(file: Path) -> tuple[int, dict[str, Any]]:
    """(offset of the data section, {tensor: {dtype, shape, data_offsets}}) of a safetensors file.

    CheckpointError naming the file when it is not one, or is shorter than its header says (truncated)."""
    total = file.stat().st_size
    with file.open("rb") as handle:
        size = int.from_bytes(handle.read(8), "little")
        raw = handle.read(size) if 8 + size <= total else b""
    try:
        header = json.loads(raw)
        if not isinstance(header, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CheckpointError(
            f"{file}: not a readable safetensors file (header of {size} bytes in a {total}-byte file: {exc})"
        ) from None
    header.pop("__metadata__", None)
    end = max((int(info["data_offsets"][1]) for info in header.values()), default=0)
    if 8 + size + end > total:
        raise CheckpointError(f"{file}: truncated ({total} bytes; its header describes {8 + size + end})")
    return 8 + size, header
