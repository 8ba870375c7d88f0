"""Re-weighting: a checkpoint with the same architecture and config as an exported one reuses its graph.

The graph is exported without constant folding, so its weight initializers carry the checkpoint's own
parameter names (``model.layers.0.self_attn.q_proj.weight``, ...). A sibling checkpoint (``step-*`` of
one training run) is then not exported again: its cache entry gets a copy of the graph's structure
(``model.onnx``, ~1 MB) whose initializers are ONNX external-data references into the checkpoint's own
safetensors files, hard-linked into the entry (:func:`write_sibling_graph`). ONNX Runtime opens it as
any exported graph and memory-maps the weights in place; nothing goes through torch.

Two checkpoints share a graph when their *graph signature* matches: config.json without the fields that
do not change the computation (``_name_or_path``, ``transformers_version``, ``torch_dtype``, ``dtype``),
the export settings, the graph format and the exporter versions. A graph is re-weightable only when
every parameter of the model is a named initializer of the graph and a tensor of the checkpoint's
safetensors files (checked at export).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sago_fast.checkpoints.resolve import CONFIG_FILE, Checkpoint
from sago_fast.checkpoints.tensors import safetensors_header
from sago_fast.errors import ExportError
from sago_fast.types import ExportSettings

if TYPE_CHECKING:
    from transformers import PreTrainedModel

MODEL_FILE = "model.onnx"
WEIGHTS_SUFFIX = "_data"  # model.onnx -> model.onnx_data
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
    return {
        name: list(info["shape"])
        for file in safetensors_files(folder)
        for name, info in safetensors_header(file)[1].items()
    }


def reweightable_initializers(
    model: PreTrainedModel, graph_path: Path, checkpoint: Checkpoint
) -> dict[str, Any] | None:
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
LINKED_PREFIX = "weights."  # a sibling entry's hard link (or copy) of a checkpoint's safetensors file
CONVERTED_FILE = "model.onnx_data"  # a sibling's tensors converted to the export dtype
ALIGNMENT = 64


def link_or_copy(source: Path, target: Path) -> bool:
    """Hard-link ``source`` as ``target`` (no bytes written); copy it, times included, where a link
    cannot be made (another file system). Returns whether it was linked."""
    import shutil

    try:
        os.link(source, target)
        return True
    except OSError:
        shutil.copy2(source, target)
        return False


def read_initializer(tensor: Any, base_dir: Path) -> np.ndarray:
    """An ONNX initializer's value, its external data read from ``base_dir`` (inline data as usual).

    Not :func:`onnx.numpy_helper.to_array` for external data: since onnx 1.23 it refuses any data file with
    more than one hard link, and a re-weighted sibling's weights are, by design, a hard link to its
    checkpoint's safetensors file (``link_or_copy``). The location stays inside ``base_dir``."""
    from onnx import numpy_helper
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data
    from onnx.helper import tensor_dtype_to_np_dtype

    if not uses_external_data(tensor):
        return numpy_helper.to_array(tensor)
    info = ExternalDataInfo(tensor)
    path = (base_dir / info.location).resolve()
    if path.parent != base_dir.resolve():
        raise ExportError(
            f"{base_dir}: initializer {tensor.name!r} points outside its folder ({info.location})"
        )
    dtype = np.dtype(tensor_dtype_to_np_dtype(tensor.data_type))
    count = int(np.prod(tensor.dims, dtype=np.int64))
    if info.length and info.length != count * dtype.itemsize:
        raise ExportError(
            f"{path}: initializer {tensor.name!r} is {info.length} bytes, not {count} × {dtype}"
        )
    array = np.fromfile(path, dtype=dtype, count=count, offset=int(info.offset or 0))
    if array.size != count:
        raise ExportError(f"{path}: initializer {tensor.name!r} runs past the end of the file")
    return array.reshape(tuple(tensor.dims))


def _point_at(tensor: Any, location: str, offset: int, length: int) -> None:
    """Make an ONNX initializer an external reference to ``length`` bytes at ``offset`` of ``location``."""
    from onnx import TensorProto

    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def write_sibling_graph(
    base_graph: Path, checkpoint: Path, names: Sequence[str], dtype: str, out_dir: Path
) -> dict[str, Any]:
    """Write ``out_dir/model.onnx``: the shared graph (``base_graph``) with ``checkpoint``'s weights.

    Each parameter named in ``names`` becomes an ONNX external-data reference (location, offset, length)
    into the checkpoint's own safetensors file, hard-linked into ``out_dir`` as ``weights.<file name>`` (a
    copy where no link can be made); a tensor stored in another dtype than the export's is converted into
    ``model.onnx_data``. The graph's other initializers (a few constants) are stored inline. ONNX Runtime
    then memory-maps the weights exactly as it does an exported graph's: no copy in process memory
    beyond its packed layouts. Returns {"file_bytes": {name: bytes}, "linked": {name: mtime_ns}} for the
    manifest (a linked file changed in place later is detected by its modification time).
    """
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(base_graph), load_external_data=False)
    target = np.float16 if dtype == "fp16" else np.float32
    wanted = set(names)
    placed: set[str] = set()
    initializers = {init.name: init for init in graph.graph.initializer}
    linked: dict[str, int] = {}
    converted: list[tuple[Any, np.ndarray]] = []
    for file in safetensors_files(checkpoint):
        data_start, header = safetensors_header(file)
        local = LINKED_PREFIX + file.name
        in_place = [n for n in header if n in wanted and SAFETENSORS_DTYPES.get(header[n]["dtype"]) is target]
        if in_place:
            if link_or_copy(file, out_dir / local):
                linked[local] = (out_dir / local).stat().st_mtime_ns
            for name in in_place:
                start, stop = header[name]["data_offsets"]
                _point_at(initializers[name], local, data_start + start, stop - start)
                placed.add(name)
        others = [n for n in header if n in wanted and n not in placed]
        if others:  # stored in another dtype: converted through torch
            import torch
            from safetensors import safe_open

            torch_target = torch.float16 if dtype == "fp16" else torch.float32
            with safe_open(str(file), framework="pt") as handle:
                for name in others:
                    array = np.ascontiguousarray(handle.get_tensor(name).to(torch_target).numpy())
                    converted.append((initializers[name], array))
                    placed.add(name)
    missing = sorted(wanted - placed)
    if missing:
        raise ExportError(f"{checkpoint}: no tensor {missing[0]!r} to re-weight the shared graph with")
    if converted:
        with (out_dir / CONVERTED_FILE).open("wb") as handle:
            for tensor, array in converted:
                offset = -handle.tell() % ALIGNMENT
                handle.write(b"\0" * offset)
                _point_at(tensor, CONVERTED_FILE, handle.tell(), array.nbytes)
                handle.write(array.tobytes())
    for name, tensor in initializers.items():  # the graph's constants, read from the base entry's file
        if name not in wanted:
            value = read_initializer(tensor, base_graph.parent)
            tensor.CopyFrom(numpy_helper.from_array(value, name))
    onnx.save(graph, str(out_dir / MODEL_FILE))
    files = [MODEL_FILE, *linked, *([CONVERTED_FILE] if converted else [])]
    return {"file_bytes": {f: (out_dir / f).stat().st_size for f in files}, "linked": linked}


def make_parameters_distinct(model: PreTrainedModel) -> dict[str, Any]:
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


def finalize_graph(model: PreTrainedModel, graph_path: Path, originals: dict[str, Any]) -> None:
    """Put the original values of nudged parameters back (model and graph), and store every initializer
    in one external data file beside the graph (a sibling's graph points the same initializers at its own
    safetensors file instead, see :func:`write_sibling_graph`)."""
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
