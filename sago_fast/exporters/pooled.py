"""The Optimum OnnxConfig class of an architecture, which the unified graph's config extends."""

from __future__ import annotations

from typing import TYPE_CHECKING

from optimum.exporters.tasks import TasksManager

from sago_fast.errors import ExportError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

TASK = "text-generation"


def base_onnx_config_class(model: PreTrainedModel) -> type:
    """The OnnxConfig class Optimum registers for this architecture's text-generation export."""
    import optimum.exporters.onnx.model_configs  # noqa: F401  (registers the architectures)

    try:
        constructor = TasksManager.get_exporter_config_constructor(
            exporter="onnx", model=model, task=TASK, library_name="transformers"
        )
    except (KeyError, ValueError) as exc:
        model_type = getattr(model.config, "model_type", "?")
        raise ExportError(f"architecture {model_type!r} cannot be exported by Optimum ONNX ({exc})") from None
    return constructor.func if hasattr(constructor, "func") else constructor
