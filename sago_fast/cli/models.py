"""Commands on one model: `sago export`, `sago probe`, `sago bench` (each command's help is its ``*_HELP``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from sago_fast.cli.options import CacheDirOpt, DeviceOpt, DtypeOpt

EXPORT_HELP = (
    "Export a checkpoint to ONNX (pooled hidden states + next-token log-probs), reusing the export cache."
)

PROBE_HELP = (
    "Probe a checkpoint on a few texts: shapes of the pooled outputs and the most likely next tokens."
)

BENCH_HELP = """Throughput of sago's ORT path vs HF transformers eager on the same job (probe and generation), as JSON."""


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


def bench_command(
    model: Annotated[str, typer.Option("--model", "-m", help="Checkpoint directory.")],
    json_out: Annotated[Path, typer.Option("--json", help="Where to write the results (JSON).")],
    device: DeviceOpt = "cpu",
    batch_sizes: Annotated[
        list[str] | None,
        typer.Option("--batch-sizes", help="Probe batch sizes (repeatable or comma list; default 1,8)."),
    ] = None,
    seq_lens: Annotated[
        list[str] | None, typer.Option("--seq-lens", help="Prompt lengths in tokens (default 64).")
    ] = None,
    gen_batch_sizes: Annotated[
        list[str] | None, typer.Option("--gen-batch-sizes", help="Generation batch sizes (default 8).")
    ] = None,
    gen_tokens: Annotated[int, typer.Option("--gen-tokens", help="New tokens per generation.")] = 16,
    repeats: Annotated[
        int, typer.Option("--repeats", help="Timed repeats per engine (medians reported).")
    ] = 3,
    compile_hf: Annotated[
        bool, typer.Option("--compile", help="Also time torch.compile (CUDA only).")
    ] = False,
    cache_dir: CacheDirOpt = None,
) -> None:
    from sago_fast.atomic import check_writable
    from sago_fast.bench import BenchConfig, format_table, parse_ints, run_bench, write_json
    from sago_fast.errors import InputError
    from sago_fast.runtime.session import check_device

    if repeats < 1:
        raise InputError(f"--repeats must be at least 1, not {repeats}")
    if gen_tokens < 1:
        raise InputError(f"--gen-tokens must be at least 1, not {gen_tokens}")
    config = BenchConfig(
        batch_sizes=parse_ints(batch_sizes, (1, 8), "--batch-sizes"),
        seq_lens=parse_ints(seq_lens, (64,), "--seq-lens"),
        gen_batch_sizes=parse_ints(gen_batch_sizes, (8,), "--gen-batch-sizes"),
        gen_tokens=gen_tokens,
        repeats=repeats,
        device=device,
        compile=compile_hf,
    )
    check_device(device)
    check_writable(json_out, what="--json")
    try:
        result = run_bench(model, config, cache_dir=cache_dir)
    except (ValueError, RuntimeError) as exc:  # bad sizes, engines that disagree: one line, not a traceback
        raise InputError(
            f"sago bench: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None
    write_json(result, json_out)
    for line in format_table(result):
        typer.echo(line)
    typer.echo(f"-> {json_out}")
