"""Throughput of sago's ORT path vs HF transformers eager on the same job (probe and generation), as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sago_fast.cli.options import CacheDirOpt, DeviceOpt


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
