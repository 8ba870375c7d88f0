"""Export a checkpoint to ONNX (pooled hidden states + next-token log-probs), reusing the export cache."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sago_fast.cli.options import CacheDirOpt, DtypeOpt


def export_command(
    checkpoint: Annotated[
        str, typer.Argument(help="Checkpoint directory (HF format, safetensors) or hub id.")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory to write the export to.")],
    dtype: DtypeOpt = "fp32",
    cache_dir: CacheDirOpt = None,
    allow_pickle: Annotated[
        bool, typer.Option(help="Accept pickle (.bin) weights. Only for trusted files.")
    ] = False,
) -> None:
    from sago_fast.atomic import check_writable
    from sago_fast.checkpoints.resolve import resolve_checkpoint
    from sago_fast.errors import SagoError
    from sago_fast.exporters.cache import ExportCache, copy_export
    from sago_fast.types import ExportSettings

    try:
        settings = ExportSettings(dtype=dtype)
    except ValueError as exc:
        raise SagoError(str(exc)) from None
    check_writable(out, what="--out", directory=True)
    ckpt = resolve_checkpoint(checkpoint, allow_pickle=allow_pickle)
    exported = ExportCache(cache_dir).get_or_export(ckpt, settings)
    target = copy_export(exported, out)
    manifest = exported.manifest
    typer.echo(
        f"exported {ckpt.path} ({manifest['model_type']}, {manifest['n_layers']} layers, d_model "
        f"{manifest['d_model']}, {settings.dtype}) -> {target}" + (" [cache hit]" if exported.reused else "")
    )
