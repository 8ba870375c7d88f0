"""Pooled probe outputs in torch (the eager reference the exported graph is compared with), and the
Optimum OnnxConfig class of an architecture.

pooled_forward returns hidden_last / hidden_mean (n_layers + 1, batch, d_model) and next_logprobs
(batch, vocab) of a left-padded batch, with position ids ``cumsum(mask) - 1``. It calls the model class's
own ``forward`` rather than Optimum's re-wrapped one: with transformers >= 4.54 the re-wrapped forward
returns the *pre-norm* residual as the last hidden state, while HF eager returns it after the final norm.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from optimum.exporters.tasks import TasksManager

from sago_fast.errors import ExportError

TASK = "text-generation"


def forward_left_padded(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
    """The model class's own forward on a left-padded batch: position ids from the mask, every hidden
    state, logits for the last position only."""
    mask = attention_mask.to(torch.int64)  # (batch, seq)
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)  # (batch, seq)
    kwargs: dict[str, Any] = {
        "input_ids": input_ids,
        "attention_mask": mask,
        "position_ids": position_ids,
        "output_hidden_states": True,
        "use_cache": False,
        "return_dict": True,
    }
    forward = type(model).forward
    if "logits_to_keep" in inspect.signature(forward).parameters:
        kwargs["logits_to_keep"] = 1
    return forward(model, **kwargs)


def pooled_forward(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Run ``model`` and pool every layer's hidden states with the attention mask (eager reference too)."""
    mask = attention_mask.to(torch.int64)  # (batch, seq)
    out = forward_left_padded(model, input_ids, mask)
    keep = mask.unsqueeze(-1).bool()  # (batch, seq, 1)
    count = mask.sum(-1, keepdim=True).to(torch.float32)  # (batch, 1)
    last, mean = [], []
    for hidden in out.hidden_states:  # n_layers + 1 tensors of (batch, seq, d_model)
        h32 = hidden.to(torch.float32)
        last.append(h32[:, -1, :])
        # where(), not multiply: padded rows may hold NaN in some attention kernels and NaN * 0 = NaN
        mean.append(torch.where(keep, h32, torch.zeros_like(h32)).sum(1) / count)
    logits = out.logits[:, -1, :].to(torch.float32)  # (batch, vocab)
    return {
        "hidden_last": torch.stack(last),
        "hidden_mean": torch.stack(mean),
        "next_logprobs": torch.log_softmax(logits, dim=-1),
    }


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
