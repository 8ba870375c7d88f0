"""Re-weighting: a checkpoint with the same architecture and config as an exported one reuses its graph.

The graph is exported without constant folding, so its weight initializers carry the checkpoint's own
parameter names (``model.layers.0.self_attn.q_proj.weight``, ...). A sibling checkpoint (``step-*`` of
one training run) is then not exported again: its cache entry holds only its manifest, tokenizer and
config, and when it is loaded its tensors are read straight from its safetensors files and handed to ONNX
Runtime as external initializers (``SessionOptions.add_external_initializers``), which override the
graph's initializers of the same names.

Two checkpoints share a graph when their *graph signature* matches: config.json without the fields that
do not change the computation (``_name_or_path``, ``transformers_version``, ``torch_dtype``, ``dtype``),
the export settings, the graph format and the exporter versions. A graph is re-weightable only when
every parameter of the model is a named initializer of the graph and a tensor of the checkpoint's
safetensors files (checked at export).
"""

from __future__ import annotations

import hashlib
import json
import mmap
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sago_fast.checkpoints.resolve import CONFIG_FILE, Checkpoint
from sago_fast.errors import ExportError
from sago_fast.types import ExportSettings

VOLATILE_CONFIG_KEYS = ("_name_or_path", "transformers_version", "torch_dtype", "dtype")


def graph_signature(
    checkpoint: Checkpoint, settings: ExportSettings, format_version: int, versions: dict[str, Any]
) -> str:
    """The key of the graph ``checkpoint`` exports to: equal for checkpoints that differ only in weights."""
    config = json.loads((checkpoint.path / CONFIG_FILE).read_text(encoding="utf-8"))
    for key in VOLATILE_CONFIG_KEYS:
        config.pop(key, None)
    payload = {
        "config": config,
        "settings": asdict(settings),
        "format_version": format_version,
        "versions": versions,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def safetensors_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


def tensor_shapes(folder: Path) -> dict[str, list[int]]:
    """Name -> shape of every tensor in ``folder``'s safetensors files (headers only)."""
    from safetensors import safe_open

    shapes: dict[str, list[int]] = {}
    for file in safetensors_files(folder):
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():
                shapes[name] = list(handle.get_slice(name).get_shape())
    return shapes


def reweightable_initializers(model: Any, graph_path: Path, checkpoint: Checkpoint) -> dict[str, Any] | None:
    """``{"names": [...], "shapes": {...}}`` of the initializers a sibling's tensors override, or None when
    the graph cannot be re-weighted (a parameter is not a named initializer or not a checkpoint tensor)."""
    import onnx

    graph = onnx.load(str(graph_path), load_external_data=False).graph
    initializers = {init.name: list(init.dims) for init in graph.initializer}
    stored = tensor_shapes(checkpoint.path)
    names = []
    for name, param in model.named_parameters():  # tied parameters appear once
        shape = list(param.shape)
        if initializers.get(name) != shape or stored.get(name) != shape:
            return None
        names.append(name)
    return {"names": names, "shapes": {n: initializers[n] for n in names}}


def sibling_fits(checkpoint: Checkpoint, reweight: dict[str, Any]) -> bool:
    """Whether ``checkpoint`` has every tensor the graph's weights come from, with the same shapes."""
    stored = tensor_shapes(checkpoint.path)
    return all(stored.get(name) == shape for name, shape in reweight["shapes"].items())


SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16}


@dataclass
class MappedWeights:
    """A checkpoint's tensors as numpy arrays, those already in the export dtype read in place from one
    read-only memory mapping per safetensors file (clean pages shared with every process reading the
    file: no copy in process memory); others (bf16, or another float width) read and converted."""

    arrays: dict[str, np.ndarray]
    mappings: list[mmap.mmap] = field(default_factory=list)

    def release_pages(self) -> None:
        """Unmap the resident pages from this process (``MADV_DONTNEED``). The mappings stay valid:
        a page read again is faulted back in from the file. Called once ONNX Runtime has copied the
        weight matrices into its packed layouts, which leaves the mapped originals almost unread."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if advice is None:  # not on this platform: the pages stay, shared and evictable
            return
        for mapping in self.mappings:
            mapping.madvise(advice)


def load_arrays(folder: Path, names: Sequence[str], dtype: str) -> MappedWeights:
    """The named tensors of ``folder``'s safetensors files as numpy arrays of the export dtype."""
    import torch
    from safetensors import safe_open

    wanted = set(names)
    target = np.float16 if dtype == "fp16" else np.float32
    weights = MappedWeights({})
    for file in safetensors_files(folder):
        with file.open("rb") as handle:
            header_size = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(header_size))
            mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        weights.mappings.append(mapping)
        convert = []
        for name, info in header.items():
            if name not in wanted:
                continue
            if SAFETENSORS_DTYPES.get(info["dtype"]) is target:
                start, stop = info["data_offsets"]
                flat = np.frombuffer(
                    mapping, dtype=target, count=(stop - start) // target().itemsize, offset=8 + header_size + start
                )
                weights.arrays[name] = flat.reshape(info["shape"])
            else:
                convert.append(name)
        if convert:
            torch_target = torch.float16 if dtype == "fp16" else torch.float32
            with safe_open(str(file), framework="pt") as handle:
                for name in convert:
                    weights.arrays[name] = np.ascontiguousarray(handle.get_tensor(name).to(torch_target).numpy())
    missing = sorted(wanted - set(weights.arrays))
    if missing:
        raise ExportError(f"{folder}: no tensor {missing[0]!r} to re-weight the shared graph with")
    return weights


def load_initializers(
    folder: Path, names: Sequence[str], dtype: str
) -> tuple[list[str], list[Any], MappedWeights]:
    """The named tensors as ORT values for ``SessionOptions.add_external_initializers``.

    Returns (names, OrtValues, weights): ORT reads the arrays' memory in place, so they (and the values)
    must outlive the session they are given to.
    """
    import onnxruntime as ort

    weights = load_arrays(folder, names, dtype)
    ordered = list(names)
    return ordered, [ort.OrtValue.ortvalue_from_numpy(weights.arrays[name]) for name in ordered], weights


def make_parameters_distinct(model: Any) -> dict[str, Any]:
    """Nudge parameters whose values equal another's (e.g. freshly initialised norms, all ones).

    The ONNX exporter merges initializers with equal values into one, which would lose the names a
    sibling's tensors are matched by. Returns {name: original tensor} of the nudged parameters, to be
    written back into the graph after export (:func:`restore_initializers`)."""
    import torch

    seen: set[tuple[Any, ...]] = set()
    originals: dict[str, Any] = {}
    with torch.no_grad():
        for name, param in model.named_parameters():
            key = (
                str(param.dtype),
                tuple(param.shape),
                hashlib.sha256(param.detach().cpu().numpy().tobytes()).digest(),
            )
            if key in seen:
                originals[name] = param.detach().clone()
                flat = param.view(-1)
                flat[0] = flat[0] + (len(originals) + 1) * 2.0**-7
            else:
                seen.add(key)
    return originals


WEIGHTS_SUFFIX = "_data"  # model.onnx -> model.onnx_data


def finalize_graph(model: Any, graph_path: Path, originals: dict[str, Any]) -> None:
    """Put the original values of nudged parameters back (model and graph), and store every initializer
    in one external data file beside the graph (ONNX Runtime only overrides external initializers)."""
    import onnx
    import torch
    from onnx import numpy_helper

    with torch.no_grad():
        params = dict(model.named_parameters())
        for name, value in originals.items():
            params[name].copy_(value)
    graph = onnx.load(str(graph_path))
    for init in graph.graph.initializer:
        if init.name in originals:
            array = originals[init.name].cpu().numpy()
            init.CopyFrom(numpy_helper.from_array(array.astype(numpy_helper.to_array(init).dtype), init.name))
    for old in graph_path.parent.glob(graph_path.name + "*"):
        old.unlink()
    save_graph(graph, graph_path)


def save_graph(graph: Any, path: Path) -> None:
    """Write an ONNX model as ``path`` + every initializer in one external file ``path`` + "_data"."""
    import onnx

    onnx.save(
        graph,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=path.name + WEIGHTS_SUFFIX,
        size_threshold=0,
    )
