"""ONNX Runtime's optimised graph, kept beside an export: later sessions open it without optimising again.

Every session ONNX Runtime opens runs its graph optimisations first: at the ``extended`` level the exported
graph of a 135M llama goes from ~8,600 nodes to ~3,600 (fused matrix products, norms, activations), ~0.4 s
of the ~0.9 s a session takes to open on 2 CPU cores, and the same work every time. So the first CPU
session of an export entry saves what its optimisations produced, once per ONNX Runtime version
(``model.ort-<version>-cpu.onnx``, ~0.6 MB), and later sessions open that graph with the
optimisations off.

The saved graph holds no weights of its own. Constant folding is off on CPU (see
:class:`~sago_fast.runtime.session.SessionOptions`), so ONNX Runtime keeps every weight as it is, under
its name; each weight of the saved graph is pointed, by name, at the very bytes the exported graph's
weight points at (its data file, or a re-weighted sibling's linked safetensors file), after checking that
they are the bytes ONNX Runtime wrote. A re-weighted sibling (same graph, other weights) writes its own
from the saved graph of the entry it shares the graph with, pointing at its own weights, without an
optimisation pass at all: when its entry is made (:func:`write_for_sibling`), or at its first session.

When the saved graph cannot be written like that (a weight ONNX Runtime changed or renamed, a new tensor
larger than :data:`INLINE_LIMIT`), a marker file (``.none``) records it and sessions optimise as before.
Only on CPU at the default ``extended`` level, for weights up to :data:`SAVE_LIMIT`; a cache folder that
cannot be written to, or a session that cannot save, costs only the saving.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sago_fast.atomic import atomic_path

log = logging.getLogger(__name__)

INLINE_LIMIT = 1 << 20  # bytes: a tensor the optimisations made (not a weight) may be stored in the graph
# bytes of weights above which no graph is saved: saving makes ONNX Runtime write every weight once more
# (then checked and removed: ~0.4 s once for SmolLM2-135M's 538 MB), while what it saves a session
# (~0.4 s) depends on the graph's nodes, not on the weights' size
SAVE_LIMIT = 4 << 30
INLINE_FIELDS = ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data")
SAVED_DATA = "weights.bin"  # ONNX Runtime's own data file of the optimised graph, removed after


def saved_graph_path(model_path: Path) -> Path:
    """Where the optimised graph of ``model_path`` is kept for this ONNX Runtime (CPU)."""
    import onnxruntime as ort

    return model_path.with_name(f"{model_path.stem}.ort-{ort.__version__}-cpu.onnx")


def is_session_cache(path: Path) -> bool:
    """Whether ``path`` in an export entry is a saved optimised graph or its marker (not the export)."""
    return ".ort-" in path.name and path.suffix in (".onnx", ".none")


def _unusable_marker(model_path: Path) -> Path:
    return saved_graph_path(model_path).with_suffix(".none")


@dataclass(frozen=True)
class GraphToOpen:
    """What a session opens: ``path``; ``optimised``: it is a saved optimised graph (optimisations off);
    ``save_to``: a folder where ONNX Runtime writes what it optimises (kept by :func:`keep_saved_graph`)."""

    path: Path
    optimised: bool = False
    save_to: Path | None = None


def graph_to_open(model_path: Path, donor: Path | None, can_save: bool) -> GraphToOpen:
    """The saved optimised graph of ``model_path`` when there is one (written from ``donor``'s, the entry
    the graph is shared with, when only it has one); else ``model_path`` itself, with a folder for ONNX
    Runtime to save its optimised graph in when ``can_save`` and it was not found unusable before."""
    saved = saved_graph_path(model_path)
    if saved.is_file():
        return GraphToOpen(saved, optimised=True)
    if donor is not None:
        write_for_sibling(donor / model_path.name, model_path)
        if saved.is_file():
            return GraphToOpen(saved, optimised=True)
    if not can_save or _unusable_marker(model_path).exists() or _weight_bytes(model_path) > SAVE_LIMIT:
        return GraphToOpen(model_path)
    try:  # beside the cache's entries: ONNX Runtime writes the weights there too, once
        return GraphToOpen(
            model_path, save_to=Path(tempfile.mkdtemp(prefix=".ort-graph-", dir=model_path.parent.parent))
        )
    except OSError:
        return GraphToOpen(model_path)


def _weight_bytes(model_path: Path) -> int:
    """The bytes of the weights beside ``model_path``: its data file, or a sibling's linked files."""
    return sum(
        f.stat().st_size
        for f in model_path.parent.iterdir()
        if f.name == model_path.name + "_data" or f.name.startswith("weights.")
    )


def write_for_sibling(shared_model_path: Path, model_path: Path) -> None:
    """The saved optimised graph of ``model_path`` (a re-weighted sibling's graph), written from that of
    the graph it shares (``shared_model_path``) when there is one; nothing otherwise."""
    structure = saved_graph_path(shared_model_path)
    if not structure.is_file():
        return
    try:
        _write_pointed(structure, model_path, saved_graph_path(model_path), written_by_ort=None)
    except Exception as exc:  # not reusable, unreadable, a read-only cache: sessions optimise as before
        log.debug("no optimised graph for %s from %s (%s)", model_path, structure, exc)


def keep_saved_graph(opened: GraphToOpen, model_path: Path) -> None:
    """After the session of ``opened`` was created: its optimised graph written beside ``model_path``, the
    weights pointing at ``model_path``'s (module docstring), or the marker where that cannot be done."""
    if opened.save_to is None:
        return
    try:
        written = opened.save_to / model_path.name
        if written.is_file():
            _write_pointed(written, model_path, saved_graph_path(model_path), written_by_ort=opened.save_to)
    except _NotReusable as exc:
        log.info("ONNX Runtime's optimised graph of %s is not kept (%s)", model_path, exc)
        try:
            _unusable_marker(model_path).write_text(str(exc), encoding="utf-8")
        except OSError:
            pass
    except Exception as exc:  # a read-only cache, a full disk: the next session optimises again
        log.debug("optimised graph of %s not kept (%s)", model_path, exc)
    finally:
        shutil.rmtree(opened.save_to, ignore_errors=True)


class _NotReusable(Exception):
    """The optimised graph cannot point at the exported graph's weights."""


def _write_pointed(structure: Path, model_path: Path, out: Path, written_by_ort: Path | None) -> None:
    """``structure`` (an optimised graph) written to ``out`` with every weight pointing where
    ``model_path``'s weight of that name points (its weights: the initializers it stores outside the graph).
    ``written_by_ort``: the folder of the data ONNX Runtime just wrote for ``structure``: each weight's
    bytes there (or in the graph, for a small one) must equal ``model_path``'s, and other tensors stored
    outside the graph are stored in it; None: ``structure`` is another entry's saved graph, whose tensors
    outside the graph must all be ``model_path``'s weights too."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    from sago_fast.exporters.reweight import read_initializer

    graph = onnx.load(str(structure), load_external_data=False)
    source = onnx.load(str(model_path), load_external_data=False)
    weights = {t.name: t for t in source.graph.initializer if uses_external_data(t)}
    for tensor in graph.graph.initializer:
        weight = weights.get(tensor.name)
        if weight is None or list(weight.dims) != list(tensor.dims) or weight.data_type != tensor.data_type:
            if uses_external_data(tensor):
                if written_by_ort is None:
                    raise _NotReusable(f"{tensor.name!r} is not a weight of {model_path}")
                _store_inline(tensor, read_initializer(tensor, written_by_ort))
            continue
        if written_by_ort is not None and not np.array_equal(
            read_initializer(tensor, written_by_ort), read_initializer(weight, model_path.parent)
        ):
            raise _NotReusable(f"ONNX Runtime changed the weight {tensor.name!r}")
        for field in INLINE_FIELDS:  # a small weight ONNX Runtime wrote in the graph
            tensor.ClearField(field)
        tensor.data_location = onnx.TensorProto.EXTERNAL
        del tensor.external_data[:]
        tensor.external_data.extend(weight.external_data)
    with atomic_path(out) as temporary:
        onnx.save(graph, str(temporary))


def _store_inline(tensor: Any, value: np.ndarray) -> None:
    """A tensor the optimisations made (a small constant), stored in the graph itself."""
    from onnx import TensorProto

    if value.nbytes > INLINE_LIMIT:
        raise _NotReusable(f"{tensor.name!r} ({value.nbytes} bytes) is not a weight of the exported graph")
    del tensor.external_data[:]
    tensor.data_location = TensorProto.DEFAULT
    tensor.raw_data = np.ascontiguousarray(value).tobytes()
