"""sago_fast: how stable are language models when the same input is expressed in different ways?

Public API (nothing heavy is imported until used)::

    import sago_fast
    model = sago_fast.load_model("path/to/checkpoint", device="auto")
    result = model.probe(["What is 2 + 3?", "Which is larger, 7 or 9?"])
    result.hidden_last.shape   # (n_layers + 1, 2, d_model)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from sago_fast.runtime.model import SagoModel

__all__ = ["SagoModel", "__version__", "load_model"]


def load_model(checkpoint: Any, device: str = "cpu", **kwargs: Any) -> SagoModel:
    """Export ``checkpoint`` to ONNX (cached by content hash) and open an ORT session on ``device``.

    See :func:`sago_fast.runtime.model.load_model` for the keyword arguments.
    """
    from sago_fast.runtime.model import load_model as _load_model

    return _load_model(checkpoint, device, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "SagoModel":
        from sago_fast.runtime.model import SagoModel

        return SagoModel
    raise AttributeError(name)
