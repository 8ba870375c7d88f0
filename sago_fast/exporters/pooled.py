"""Pooled probe outputs in torch (the eager reference the exported graph is compared with), and the
Optimum OnnxConfig class of an architecture.

pooled_forward returns hidden_last / hidden_mean (n_layers + 1, batch, d_model) and next_logprobs
(batch, vocab) of a left-padded batch, with position ids ``cumsum(mask) - 1``.
"""

from __future__ import annotations

from typing import Any

import torch
from optimum.exporters.tasks import TasksManager

from sago_fast.errors import ExportError

TASK = "text-generation"


def pooled_forward(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """hidden_last, hidden_mean and next_logprobs of a left-padded batch: the graph's prefill computation
    run eagerly in torch (the reference engine of ``sago bench`` and the GPU tests)."""
    from sago_fast.exporters.unified import unified_forward

    targets = input_ids[:, :0]  # nothing to score
    out = unified_forward(model, input_ids, attention_mask, None, targets, with_past=False)
    return {name: out[name] for name in ("hidden_last", "hidden_mean", "next_logprobs")}


def base_onnx_config_class(model: Any) -> type:
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
