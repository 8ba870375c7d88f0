"""A LoRA adapter over its base's exported graph: the adapted weights, built in memory, never on disk.

The base is exported once (its graph keeps every parameter as a named initializer, see
:mod:`sago_fast.exporters.reweight`). For an adapter, each adapted linear layer's weight ``W`` is read from
the base's cache entry and replaced by ``W + scale · B A`` (float32 arithmetic, stored in the export's
dtype); ONNX Runtime takes the replacements as session initializers
(``SessionOptions.add_initializer``) and reads every other weight from the base's file as usual. An
adapter therefore adds nothing to the export cache, and a loaded adapter holds the base's weights plus
its adapted matrices (the originals of those are not loaded). Nothing goes through torch.

Shapes: A (r, in), B (out, r), W (out, in); GPT-2's Conv1D stores W as (in, out) (``fan_in_fan_out``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from sago_fast.checkpoints.adapters import adapter_modules, adapter_weights, read_adapter_config
from sago_fast.checkpoints.resolve import Checkpoint
from sago_fast.checkpoints.tensors import safetensors_header
from sago_fast.errors import CheckpointError, ExportError
from sago_fast.exporters.reweight import read_initializer

log = logging.getLogger(__name__)

SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "F64": np.float64}


def _read_tensor(file: Path, data_start: int, info: dict[str, Any]) -> np.ndarray:
    """One tensor of a safetensors file as float32 (bf16 widened bit-wise)."""
    start, stop = info["data_offsets"]
    dtype = info["dtype"]
    if dtype not in SAFETENSORS_DTYPES:
        raise CheckpointError(f"{file}: tensor dtype {dtype} is not supported for LoRA factors")
    with file.open("rb") as handle:
        handle.seek(data_start + start)
        raw = handle.read(stop - start)
    if dtype == "BF16":
        bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
        array = bits.view(np.float32)
    else:
        array = np.frombuffer(raw, dtype=SAFETENSORS_DTYPES[dtype]).astype(np.float32)
    return array.reshape(info["shape"])


def _graph_weights(graph_path: Path) -> dict[str, Any]:
    """Initializer name -> its TensorProto (external data not loaded)."""
    import onnx

    graph = onnx.load(str(graph_path), load_external_data=False).graph
    return {init.name: init for init in graph.initializer}


def adapted_weights(adapter: Checkpoint, graph_path: Path, weight_names: list[str]) -> dict[str, np.ndarray]:
    """Initializer name -> ``W + scale · B A`` for every layer ``adapter`` adapts, in the base graph's
    dtype. ``weight_names``: the base graph's named parameters (its manifest's ``reweight`` names)."""
    config = read_adapter_config(adapter.path)
    file = adapter_weights(adapter.path)
    data_start, header = safetensors_header(file)
    modules = adapter_modules(adapter.path, header)
    named = set(weight_names)
    initializers = _graph_weights(graph_path)
    out: dict[str, np.ndarray] = {}
    for module, (key_a, key_b) in modules.items():
        name = module + ".weight"
        if name not in named or name not in initializers:
            raise ExportError(
                f"{file}: adapted module {module!r} has no weight {name!r} in the base's graph "
                "(LoRA applies to linear layers: attention and MLP projections)"
            )
        a = _read_tensor(file, data_start, header[key_a])  # (r, in)
        b = _read_tensor(file, data_start, header[key_b])  # (out, r)
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
            raise CheckpointError(f"{file}: {module}: lora_A {a.shape} and lora_B {b.shape} do not chain")
        delta = (b @ a) * np.float32(config.scale(module, a.shape[0]))  # (out, in)
        if config.fan_in_fan_out:
            delta = delta.T
        weight = read_initializer(initializers[name], graph_path.parent)  # external data, maybe a hard link
        if weight.shape != delta.shape:
            raise CheckpointError(
                f"{file}: {module}: the adapter's update is {delta.shape}, the base's weight {weight.shape}"
            )
        out[name] = np.ascontiguousarray((weight.astype(np.float32) + delta).astype(weight.dtype))
    log.debug("%s: %d adapted weights over %s", adapter.path, len(out), graph_path.parent)
    return out
