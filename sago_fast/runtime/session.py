"""ORT sessions whose execution provider is checked after creation (ORT falls back to CPU silently)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sago_fast.errors import DeviceError

log = logging.getLogger(__name__)

DEVICES = ("cpu", "cuda", "auto")
CUDA_EP = "CUDAExecutionProvider"
CPU_EP = "CPUExecutionProvider"


@dataclass(frozen=True)
class SessionOptions:
    """Knobs for ``onnxruntime.InferenceSession``.

    intra_op_threads: 0 lets ORT use every physical core.
    optimization: "all" (hardware-specific fusions, applied at load, never saved) or "extended"/"basic".
    """

    intra_op_threads: int = 0
    optimization: str = "all"


def cuda_provider_listed() -> bool:
    import onnxruntime as ort

    return CUDA_EP in ort.get_available_providers()


def resolve_device(device: str) -> str:
    """Map ``auto`` to ``cuda`` when the CUDA provider is listed and a GPU is visible, else ``cpu``."""
    if device not in DEVICES:
        raise DeviceError(f"device must be one of {', '.join(DEVICES)}, not {device!r}")
    if device != "auto":
        return device
    if not cuda_provider_listed():
        return "cpu"
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:  # pragma: no cover - torch is a dependency
        return "cuda"


def providers_for(device: str) -> list[str]:
    return [CUDA_EP, CPU_EP] if device == "cuda" else [CPU_EP]


def open_session(path: Path, device: str, options: SessionOptions = SessionOptions()) -> tuple[Any, str]:
    """Create an InferenceSession for ``device`` (cpu|cuda, already resolved) and verify its provider.

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
    so.intra_op_num_threads = options.intra_op_threads
    so.log_severity_level = 3
    if device == "cuda" and not cuda_provider_listed():
        raise DeviceError(
            "device 'cuda' asked, but this onnxruntime has no CUDAExecutionProvider (install onnxruntime-gpu)"
        )
    try:
        session = ort.InferenceSession(str(path), sess_options=so, providers=providers_for(device))
    except Exception as exc:
        raise DeviceError(f"{path}: ONNX Runtime could not open the graph on {device} ({exc})") from None
    active = session.get_providers()[0]
    if device == "cuda" and active != CUDA_EP:
        raise DeviceError(
            f"device 'cuda' asked, but ONNX Runtime runs on {active} (CUDA/cuDNN libraries not loadable?)"
        )
    log.info("ONNX Runtime session on %s", active)
    return session, active
