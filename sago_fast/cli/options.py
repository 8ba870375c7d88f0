"""Options shared by several commands, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DeviceOpt = Annotated[str, typer.Option("--device", help="cpu, cuda, or auto (CUDA when it really runs).")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="Export precision: fp32 or fp16.")]
CacheDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        help="Export cache folder (default $SAGO_CACHE_DIR/exports or ~/.cache/sago_fast/exports).",
    ),
]
DbOpt = Annotated[Path, typer.Option("--db", help="DuckDB results file.")]
