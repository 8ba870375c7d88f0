"""Export one checkpoint's graphs (probe, score, decode) into a directory (the cache decides where and when)."""

from __future__ import annotations

import json
import logging
import shutil
import warnings
from pathlib import Path
from typing import Any

from sago_fast.checkpoints.resolve import CONFIG_FILE, TOKENIZER_FILES, Checkpoint
from sago_fast.errors import ExportError
from sago_fast.exporters.decode import decode_config
from sago_fast.exporters.pooled import INPUT_NAMES, OUTPUT_NAMES, pooled_probe_config, target_logprob_config
from sago_fast.types import ExportSettings

log = logging.getLogger(__name__)

PROBE_FILE = "probe.onnx"
SCORE_FILE = "score.onnx"
DECODE_FILE = "decode.onnx"
MANIFEST_FILE = "manifest.json"
FORMAT_VERSION = 3  # bump when the graph's inputs/outputs or semantics change


def _max_positions(config: Any) -> int | None:
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _eos_token_ids(model: Any) -> list[int]:
    """End-of-sequence ids greedy decoding stops at: the generation config's, else the model config's."""
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, "eos_token_id", None)
        if value is not None:
            return [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
    return []


def export_checkpoint(
    checkpoint: Checkpoint, out_dir: Path, settings: ExportSettings, key: str
) -> dict[str, Any]:
    """Export ``checkpoint`` to ``out_dir`` (which must be empty or absent); returns the manifest.

    Writes ``probe.onnx``, ``score.onnx`` and ``decode.onnx`` (+ external data for large models), the tokenizer and config files, and
    ``manifest.json`` describing the graph. Any exporter failure becomes an :class:`ExportError`.
    """
    import torch
    from optimum.exporters.onnx import export as optimum_export
    from transformers import AutoModelForCausalLM

    torch_dtype = torch.float16 if settings.dtype == "fp16" else torch.float32
    try:
        model = AutoModelForCausalLM.from_pretrained(
            checkpoint.path, dtype=torch_dtype, attn_implementation="eager", use_safetensors=None
        ).eval()
    except Exception as exc:
        raise ExportError(f"{checkpoint.path}: transformers cannot load this checkpoint ({exc})") from None
    config = pooled_probe_config(model, float_dtype=settings.dtype)
    out_dir.mkdir(parents=True, exist_ok=True)
    log.info("exporting %s (%s, %s) to ONNX", checkpoint.path, checkpoint.model_type, settings.dtype)
    try:
        with warnings.catch_warnings():
            # the TorchScript tracer warns about every Python branch it freezes; parity tests cover them
            warnings.simplefilter("ignore")
            optimum_export(
                model, config, out_dir / PROBE_FILE, opset=settings.opset, disable_dynamic_axes_fix=True
            )
            score_config = target_logprob_config(model, float_dtype=settings.dtype)
            optimum_export(
                model, score_config, out_dir / SCORE_FILE, opset=settings.opset, disable_dynamic_axes_fix=True
            )
            optimum_export(
                model,
                decode_config(model, float_dtype=settings.dtype),
                out_dir / DECODE_FILE,
                opset=settings.opset,
                disable_dynamic_axes_fix=True,
            )
    except Exception as exc:
        raise ExportError(f"{checkpoint.path}: ONNX export failed ({type(exc).__name__}: {exc})") from exc

    for name in (CONFIG_FILE, *TOKENIZER_FILES, "generation_config.json"):
        if (checkpoint.path / name).is_file():
            shutil.copy2(checkpoint.path / name, out_dir / name)
    manifest = {
        "format_version": FORMAT_VERSION,
        "key": key,
        "checkpoint": str(checkpoint.path),
        "content_hash": checkpoint.content_hash,
        "model_type": checkpoint.model_type,
        "dtype": settings.dtype,
        "n_layers": int(model.config.num_hidden_layers),
        "d_model": int(model.config.hidden_size),
        "vocab_size": int(model.get_output_embeddings().weight.shape[0]),
        "max_positions": _max_positions(model.config),
        "inputs": list(INPUT_NAMES),
        "outputs": list(OUTPUT_NAMES),
        "eos_token_ids": _eos_token_ids(model),
        "files": {"probe": PROBE_FILE, "score": SCORE_FILE, "decode": DECODE_FILE},
    }
    (out_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return manifest
