"""Export one checkpoint's graph (``model.onnx``: prefill, scoring and decoding in one graph, so the weights
are written and loaded once) into a directory; the cache decides where and when."""

from __future__ import annotations

import json
import logging
import shutil
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sago_fast.checkpoints.resolve import CONFIG_FILE, TOKENIZER_FILES, Checkpoint
from sago_fast.errors import ExportError
from sago_fast.exporters.fused_rotary import fused_rotary
from sago_fast.exporters.grouped_attention import attention_for
from sago_fast.exporters.reweight import (
    MODEL_FILE,
    finalize_graph,
    make_parameters_distinct,
    reweightable_initializers,
)
from sago_fast.types import POOLED_OUTPUTS, ExportSettings

if TYPE_CHECKING:
    from transformers import PreTrainedModel

log = logging.getLogger(__name__)

MANIFEST_FILE = "manifest.json"
# bump when the graph's inputs/outputs or semantics change; 7: grouped-query attention without copies of
# the KV cache (exporters/grouped_attention.py), so that cached exports get it; 8: target_best (the arg-max
# at each scored position: whether a continuation is the greedy one, without decoding it); 9: rotary
# embeddings as one ONNX Runtime node per rotation (exporters/fused_rotary.py)
FORMAT_VERSION = 9


def _max_positions(config: Any) -> int | None:
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def eos_token_ids(folder: Path) -> list[int]:
    """End-of-sequence ids greedy decoding stops at: generation_config.json's, else config.json's."""
    for name in ("generation_config.json", CONFIG_FILE):
        file = folder / name
        if file.is_file():
            value = json.loads(file.read_text(encoding="utf-8")).get("eos_token_id")
            if value is not None:
                return [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
    return []


def _export_graph(
    model: PreTrainedModel, path: Path, settings: ExportSettings, checkpoint: Checkpoint
) -> bool:
    """Export the unified graph to ``path``; returns whether it has a KV cache.

    No constant folding: initializers keep the checkpoint's parameter names (siblings re-weight them by
    name) and a tied output matrix is stored once. When the graph with past inputs cannot be exported,
    the graph without them is (prefills and whole-sequence scoring work; generation is refused)."""
    from optimum.exporters.onnx import export as optimum_export

    from sago_fast.exporters.unified import unified_config  # torch and Optimum: only when exporting

    def export(with_past: bool) -> None:
        optimum_export(
            model,
            unified_config(model, float_dtype=settings.dtype, with_past=with_past),
            path,
            opset=settings.opset,
            disable_dynamic_axes_fix=True,
            do_constant_folding=False,
        )

    originals = make_parameters_distinct(model)  # equal initializers would be merged, losing their names
    try:
        export(with_past=True)
        kv_cache = True
    except Exception as exc:
        log.warning(
            "%s: the graph with a KV cache could not be exported (%s: %s); exporting it without one: "
            "options are scored as whole sequences and generation tasks are refused",
            checkpoint.path,
            type(exc).__name__,
            str(exc).splitlines()[0][:200] if str(exc) else "",
        )
        for leftover in path.parent.glob(path.name + "*"):
            leftover.unlink()
        export(with_past=False)
        kv_cache = False
    finalize_graph(model, path, originals)
    return kv_cache


def copy_model_files(checkpoint_dir: Path, out_dir: Path) -> None:
    """The config, generation config and tokenizer files an export entry carries beside its graph."""
    for name in (CONFIG_FILE, *TOKENIZER_FILES, "generation_config.json"):
        if (checkpoint_dir / name).is_file():
            shutil.copy2(checkpoint_dir / name, out_dir / name)


def export_checkpoint(
    checkpoint: Checkpoint, out_dir: Path, settings: ExportSettings, key: str
) -> dict[str, Any]:
    """Export ``checkpoint`` to ``out_dir`` (which must be empty or absent); returns the manifest.

    Writes ``model.onnx`` (+ one external data file for models over 2 GB), the tokenizer and config
    files, and ``manifest.json`` describing the graph. Any exporter failure becomes an :class:`ExportError`.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch_dtype = torch.float16 if settings.dtype == "fp16" else torch.float32
    try:
        attention = attention_for(checkpoint.model_type, AutoConfig.from_pretrained(checkpoint.path))
        model = AutoModelForCausalLM.from_pretrained(
            checkpoint.path, dtype=torch_dtype, attn_implementation=attention, use_safetensors=None
        ).eval()
    except Exception as exc:
        raise ExportError(f"{checkpoint.path}: transformers cannot load this checkpoint ({exc})") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    log.info("exporting %s (%s, %s) to ONNX", checkpoint.path, checkpoint.model_type, settings.dtype)
    try:
        with warnings.catch_warnings():
            # the TorchScript tracer warns about every Python branch it freezes; parity tests cover them
            warnings.simplefilter("ignore")
            with fused_rotary(model):
                kv_cache = _export_graph(model, out_dir / MODEL_FILE, settings, checkpoint)
    except Exception as exc:
        raise ExportError(f"{checkpoint.path}: ONNX export failed ({type(exc).__name__}: {exc})") from exc
    reweight = reweightable_initializers(model, out_dir / MODEL_FILE, checkpoint)

    copy_model_files(checkpoint.path, out_dir)
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
        "outputs": list(POOLED_OUTPUTS),
        "eos_token_ids": eos_token_ids(checkpoint.path),
        "files": {"model": MODEL_FILE},
        "kv_cache": kv_cache,
        "reweight": reweight,
    }
    manifest["file_bytes"] = {
        f.name: f.stat().st_size for f in sorted(out_dir.iterdir()) if f.name.startswith(MODEL_FILE)
    }
    (out_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return manifest
