"""Probe a checkpoint on a few texts: shapes of the pooled outputs and the most likely next tokens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from sago_fast.cli.options import CacheDirOpt, DeviceOpt


def probe_command(
    checkpoint: Annotated[
        str, typer.Argument(help="Checkpoint directory (HF format, safetensors) or hub id.")
    ],
    texts: Annotated[list[str], typer.Argument(help="Prompts to probe.")],
    device: DeviceOpt = "cpu",
    cache_dir: CacheDirOpt = None,
    top_k: Annotated[int, typer.Option(help="Next tokens to show per text.")] = 3,
    save: Annotated[Path | None, typer.Option("--save", help="Write the arrays to this .npz file.")] = None,
) -> None:
    import numpy as np

    import sago_fast
    from sago_fast.atomic import check_writable
    from sago_fast.checkpoints.resolve import resolve_checkpoint
    from sago_fast.errors import InputError
    from sago_fast.runtime.light import start_without_torch_if_exported
    from sago_fast.runtime.session import check_device

    if top_k < 1:
        raise InputError(f"--top-k must be at least 1, not {top_k}")
    resolved = check_device(device)
    if save is not None:
        check_writable(save, what="--save")
    ckpt = resolve_checkpoint(checkpoint)
    start_without_torch_if_exported([ckpt], resolved, cache_dir)
    model = sago_fast.load_model(ckpt, device=device, cache_dir=cache_dir)
    result = model.probe(texts)
    typer.echo(
        f"{model.provider}: hidden_last/hidden_mean {tuple(result.hidden_last.shape)}, "
        f"next_logprobs {tuple(result.next_logprobs.shape)}"
    )
    for i in range(len(texts)):
        best = np.argsort(-result.next_logprobs[i])[:top_k]
        shown = ", ".join(
            f"{json.dumps(model.tokenizer.decode([int(t)]))} {result.next_logprobs[i, t]:.3f}" for t in best
        )
        typer.echo(f"[{i}] {result.n_tokens[i]} tokens -> {shown}")
    if save is not None:
        from sago_fast.atomic import atomic_path

        with atomic_path(save) as tmp:
            with open(tmp, "wb") as handle:
                np.savez(
                    handle,
                    hidden_last=result.hidden_last,
                    hidden_mean=result.hidden_mean,
                    next_logprobs=result.next_logprobs,
                    n_tokens=result.n_tokens,
                )
        typer.echo(f"saved {save}")
