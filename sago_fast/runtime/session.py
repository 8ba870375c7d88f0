"""ORT sessions whose execution provider is checked after creation (ORT falls back to CPU silently)."""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sago_fast.errors import DeviceError, InputError
from sago_fast.exporters.optimised_graph import SAVED_DATA
from sago_fast.runtime.threads import default_threads

log = logging.getLogger(__name__)

DEVICES = ("cpu", "cuda", "auto")
CUDA_EP = "CUDAExecutionProvider"
CPU_EP = "CPUExecutionProvider"


@dataclass(frozen=True)
class SessionOptions:
    """Knobs for ``onnxruntime.InferenceSession``.

    intra_op_threads: 0 (default): ``$SAGO_THREADS`` if it is set
        (:func:`~sago_fast.runtime.threads.default_threads`), else ORT's own choice, every physical core.
    optimization: "extended" (default: ORT's fusions for transformer blocks; on CPU the graph they make is
        kept beside the export and opened by later sessions, see :mod:`sago_fast.exporters.optimised_graph`),
        "all" (adds convolution layout transforms: ~0.6 s more per load for a 135M model, no faster here)
        or "basic".
    io_binding: "auto" (on for CUDA: the decode loop keeps its KV cache on the device), "on", "off".
    prepack: True (default): every weight matrix is copied into MLAS's packed layout when the session
        opens. False: ONNX Runtime multiplies by the weights where they lie, memory-mapped from the cache
        file (or a sibling's safetensors) and shared with every process using them; the session opens
        ~0.7 s sooner for a 135M model, but small-batch passes (option blocks, decode steps) run up to
        ~30% slower on CPU, so it pays only for loading many checkpoints that each run little.
    memory_reuse: whether ORT's allocation planner assigns intermediate tensors to the buffers of tensors
        no longer needed, at load time. "auto" (default): off on CPU, on on CUDA; "on"; "off". For the
        135M llama graph (~3,600 nodes) that planning takes ~1.1 s of the ~2.4 s a session takes to open
        on CPU, and runs were no faster and peaked no lower with it: the memory arena recycles freed
        buffers at run time anyway. (ORT's own training frontend turns it off for peak memory.)

    spinning: True (default): ONNX Runtime's intra-op threads spin while they wait for work, as ORT does by
        default; False: they sleep. Alone, spinning was 3-7% faster (prefill and decode of SmolLM2-135M on
        2 cores); with two processes on the same cores, each one's spinning threads take the cores the
        other's threads need (two demo-zoo runs on one results file: 1.09x one run with spinning, 0.97x
        without). ``sago run`` turns it off for a checkpoint when another process of the machine writes
        the same results file.

    On CPU, ORT's constant folding is always off: it would fold each ``Transpose(weight)`` of the exported
    graph into a transposed copy (the session opened ~1 s later and held ~170 MiB more for a 135M model);
    without it the matrix products read the original (out, in) weights through ``FusedMatMul(transB=1)``.
    """

    intra_op_threads: int = 0
    optimization: str = "extended"
    io_binding: str = "auto"
    prepack: bool = True
    memory_reuse: str = "auto"
    spinning: bool = True

    def __post_init__(self) -> None:
        for name, allowed in (
            ("optimization", ("extended", "all", "basic")),
            ("io_binding", ("auto", "on", "off")),
            ("memory_reuse", ("auto", "on", "off")),
        ):
            if getattr(self, name) not in allowed:
                raise InputError(f"SessionOptions.{name} must be one of {', '.join(allowed)}")


def cuda_provider_listed() -> bool:
    """Whether ORT lists the CUDA provider (it may still be unable to load it)."""
    import onnxruntime as ort

    return CUDA_EP in ort.get_available_providers()


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Point file descriptor 2 at /dev/null for the duration (C++ libraries write there directly)."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _preload_cuda_libraries(ort: Any) -> None:
    """Load the CUDA and cuDNN libraries of the ``nvidia-*`` pip packages beside torch (``preload_dlls``,
    onnxruntime-gpu 1.21 and later), so the CUDA provider finds them without LD_LIBRARY_PATH; importing
    torch first loads the same libraries where torch has CUDA."""
    with contextlib.suppress(Exception):
        import torch  # noqa: F401  (its CUDA libraries, when it has them)
    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:  # it prints each library it cannot load: cuda_runs says why in one line instead
        with contextlib.suppress(Exception), contextlib.redirect_stdout(io.StringIO()):
            preload()


@functools.lru_cache(maxsize=1)
def cuda_runs() -> tuple[bool, str]:
    """Open a one-node graph on the CUDA provider and check that it really runs there.

    ``onnxruntime-gpu`` lists CUDAExecutionProvider even where CUDA cannot load, and a session asked for
    CUDA then silently runs on CPU; this probe costs milliseconds and answers before any export work.
    Returns (ok, reason).
    """
    if not cuda_provider_listed():
        return False, "this onnxruntime has no CUDAExecutionProvider (install onnxruntime-gpu)"
    import onnxruntime as ort
    from onnx import TensorProto, helper

    node = helper.make_node("Identity", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "cuda_check",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        with native_stderr_silenced():  # ORT's C++ logger prints the failed CUDA load; we report it once
            _preload_cuda_libraries(ort)
            session = ort.InferenceSession(
                model.SerializeToString(), sess_options=so, providers=providers_for("cuda")
            )
    except Exception as exc:
        return False, f"ONNX Runtime could not create a CUDA session ({str(exc).splitlines()[0]})"
    active = session.get_providers()[0]
    if active != CUDA_EP:
        return False, f"ONNX Runtime falls back to {active} (CUDA/cuDNN libraries not loadable or no GPU)"
    return True, "ok"


def resolve_device(device: str) -> str:
    """``cpu`` stays; ``cuda`` must really run (else DeviceError); ``auto`` is cuda when it runs, else cpu."""
    if device not in DEVICES:
        raise DeviceError(f"device must be one of {', '.join(DEVICES)}, not {device!r}")
    if device == "cpu":
        return device
    ok, reason = cuda_runs()
    if device == "cuda" and not ok:
        raise DeviceError(f"device 'cuda' asked, but {reason}")
    if device == "auto":
        if not ok:
            log.info("device auto: using CPU (%s)", reason)
        return "cuda" if ok else "cpu"
    return device


def check_device(device: str, flag: str = "--device") -> str:
    """Validate ``device`` before any work (export, training, loading): one :class:`DeviceError` line
    naming ``flag``, in well under a second, for an unknown name or a CUDA that does not run. Returns the
    resolved device."""
    try:
        return resolve_device(device)
    except DeviceError as exc:
        raise DeviceError(f"{flag} {device}: {exc}") from None


def providers_for(device: str) -> list[str]:
    return [CUDA_EP, CPU_EP] if device == "cuda" else [CPU_EP]


def open_session(
    path: Path,
    device: str,
    options: SessionOptions = SessionOptions(),
    initializers: Mapping[str, Any] | None = None,
    *,
    optimised: bool = False,
    save_optimised: Path | None = None,
) -> tuple[Any, str]:
    """Create an InferenceSession for ``device`` (cpu|cuda, already resolved) and verify its provider.

    initializers: name -> ``OrtValue`` replacing the graph's initializer of that name (a LoRA adapter's
    weights); the caller keeps them alive as long as the session. optimised: ``path`` is a graph ONNX
    Runtime already optimised (opened with its optimisations off); save_optimised: a folder where ONNX
    Runtime writes the graph it optimises, its data in ``SAVED_DATA`` (see
    :mod:`sago_fast.exporters.optimised_graph`).

    Returns (session, active provider name). Raises DeviceError when ``cuda`` was asked and the session
    does not actually run on the CUDA provider.
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = {
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    }[options.optimization]
    if optimised:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if save_optimised is not None:
        so.optimized_model_filepath = str(save_optimised / path.name)
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name", SAVED_DATA)
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    so.intra_op_num_threads = options.intra_op_threads or default_threads()
    so.log_severity_level = 3
    if not options.spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not options.prepack:
        so.add_session_config_entry("session.disable_prepacking", "1")
    so.enable_mem_reuse = options.memory_reuse == "on" or (
        options.memory_reuse == "auto" and device == "cuda"
    )
    # on CPU, no transposed copies of the weights under new names (see SessionOptions)
    disabled = ["ConstantFolding"] if device == "cpu" else []
    for name, value in (initializers or {}).items():
        so.add_initializer(name, value)
    if device == "cuda" and not cuda_provider_listed():
        raise DeviceError(
            "device 'cuda' asked, but this onnxruntime has no CUDAExecutionProvider (install onnxruntime-gpu)"
        )
    try:
        session = ort.InferenceSession(
            str(path), sess_options=so, providers=providers_for(device), disabled_optimizers=disabled
        )
    except Exception as exc:
        raise DeviceError(f"{path}: ONNX Runtime could not open the graph on {device} ({exc})") from None
    active = session.get_providers()[0]
    if device == "cuda" and active != CUDA_EP:
        raise DeviceError(
            f"device 'cuda' asked, but ONNX Runtime runs on {active} (CUDA/cuDNN libraries not loadable?)"
        )
    log.info("ONNX Runtime session on %s", active)
    return session, active
