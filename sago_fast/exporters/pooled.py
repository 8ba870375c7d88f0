"""The probe graph: an Optimum OnnxConfig whose outputs are pooled hidden states and next-token log-probs.

Inputs (left-padded):   input_ids (batch, seq) int64, attention_mask (batch, seq) int64
Outputs (no seq axis):  hidden_last   (n_layers + 1, batch, d_model) float32
                        hidden_mean   (n_layers + 1, batch, d_model) float32
                        next_logprobs (batch, vocab) float32

Position ids are computed inside the graph as ``cumsum(mask) - 1`` so left padding gives every text the
positions it would have alone. The patcher calls the model class's own ``forward`` rather than Optimum's
re-wrapped one: with transformers >= 4.54 the re-wrapped forward returns the *pre-norm* residual as the last
hidden state, while HF eager returns it after the final norm.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from typing import Any

import torch
from optimum.exporters.onnx.model_patcher import ModelPatcher
from optimum.exporters.tasks import TasksManager

from sago_fast.errors import ExportError

TASK = "text-generation"
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAMES = ("hidden_last", "hidden_mean", "next_logprobs")


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


def target_logprob_forward(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, target_ids: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Log-probs of ``target_ids`` (batch, K) as the last K tokens of each left-padded row.

    Position t's logits predict token t + 1, so the last K targets are scored by the logits of positions
    [-K-1, -1); only (batch, K) numbers leave the graph (no [batch, seq, vocab] logits).
    """
    out = forward_left_padded(model, input_ids, attention_mask)
    final = out.hidden_states[-1]  # (batch, seq, d_model), after the final norm
    # positions seq-K-1 .. seq-2 built from tensors (not Python ints) so the trace keeps them dynamic
    offsets = torch.ones_like(target_ids[0]).cumsum(0) - 1  # (K,) 0..K-1
    seq = torch.ones_like(input_ids[0]).sum()
    k = torch.ones_like(target_ids[0]).sum()
    positions = offsets + (seq - k - 1)  # (K,)
    index = positions.view(1, -1, 1).expand(final.shape[0], -1, final.shape[2])
    scoring = torch.gather(final, 1, index)  # (batch, K, d_model)
    logits = model.get_output_embeddings()(scoring).to(torch.float32)  # (batch, K, vocab)
    logp = torch.log_softmax(logits, dim=-1)
    return {"target_logprobs": torch.gather(logp, 2, target_ids.unsqueeze(-1)).squeeze(-1)}  # (batch, K)


class TargetLogprobPatcher(ModelPatcher):
    """Replaces Optimum's patched forward by :func:`target_logprob_forward`."""

    def __init__(self, config: Any, model: Any, model_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__(config, model, model_kwargs)

        def patched_forward(
            input_ids: torch.Tensor, attention_mask: torch.Tensor, target_ids: torch.Tensor, **_: Any
        ) -> Any:
            return target_logprob_forward(model, input_ids, attention_mask, target_ids)

        self.patched_forward = patched_forward


class PooledProbePatcher(ModelPatcher):
    """Replaces Optimum's patched forward by :func:`pooled_forward` on the model's real forward."""

    def __init__(self, config: Any, model: Any, model_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__(config, model, model_kwargs)

        def patched_forward(input_ids: torch.Tensor, attention_mask: torch.Tensor, **_: Any) -> Any:
            return pooled_forward(model, input_ids, attention_mask)

        self.patched_forward = patched_forward


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


def pooled_probe_config(model: Any, float_dtype: str = "fp32") -> Any:
    """Instantiate a subclass of the architecture's OnnxConfig with the pooled probe outputs."""
    base = base_onnx_config_class(model)

    class PooledProbeOnnxConfig(base):  # type: ignore[misc, valid-type]
        _MODEL_PATCHER = PooledProbePatcher

        @property
        def inputs(self) -> dict[str, dict[int, str]]:
            return OrderedDict(
                input_ids={0: "batch_size", 1: "sequence_length"},
                attention_mask={0: "batch_size", 1: "sequence_length"},
            )

        @property
        def outputs(self) -> dict[str, dict[int, str]]:
            return OrderedDict(
                hidden_last={1: "batch_size"},
                hidden_mean={1: "batch_size"},
                next_logprobs={0: "batch_size"},
            )

        def generate_dummy_inputs(self, framework: str = "pt", **kwargs: Any) -> dict[str, Any]:
            dummy = super().generate_dummy_inputs(framework, **kwargs)
            # Left-pad one row: tracing must take the padded-mask branch of every data-dependent check.
            mask = torch.ones_like(dummy["attention_mask"])
            mask[0, : max(1, mask.shape[1] // 4)] = 0
            return {"input_ids": dummy["input_ids"], "attention_mask": mask}

    PooledProbeOnnxConfig.__name__ = f"PooledProbe{base.__name__}"
    return PooledProbeOnnxConfig(
        model.config, task=TASK, float_dtype=float_dtype, use_past=False, use_past_in_inputs=False
    )


def target_logprob_config(model: Any, float_dtype: str = "fp32") -> Any:
    """OnnxConfig of the scoring graph: inputs input_ids, attention_mask (batch, seq) and target_ids
    (batch, K); output target_logprobs (batch, K)."""
    base = base_onnx_config_class(model)

    class TargetLogprobOnnxConfig(base):  # type: ignore[misc, valid-type]
        _MODEL_PATCHER = TargetLogprobPatcher

        @property
        def inputs(self) -> dict[str, dict[int, str]]:
            return OrderedDict(
                input_ids={0: "batch_size", 1: "sequence_length"},
                attention_mask={0: "batch_size", 1: "sequence_length"},
                target_ids={0: "batch_size", 1: "target_length"},
            )

        @property
        def outputs(self) -> dict[str, dict[int, str]]:
            return OrderedDict(target_logprobs={0: "batch_size", 1: "target_length"})

        def generate_dummy_inputs(self, framework: str = "pt", **kwargs: Any) -> dict[str, Any]:
            # Optimum has no generator for target_ids: build the (left-padded) batch here
            vocab = int(getattr(self._config, "vocab_size", 64))
            generator = torch.Generator().manual_seed(0)
            input_ids = torch.randint(0, vocab, (2, 16), generator=generator)
            mask = torch.ones_like(input_ids)
            mask[0, :4] = 0
            return {"input_ids": input_ids, "attention_mask": mask, "target_ids": input_ids[:, -3:].clone()}

        def ordered_inputs(self, model: Any) -> dict[str, dict[int, str]]:
            return self.inputs  # target_ids is not a parameter of the model's forward

    TargetLogprobOnnxConfig.__name__ = f"TargetLogprob{base.__name__}"
    return TargetLogprobOnnxConfig(
        model.config, task=TASK, float_dtype=float_dtype, use_past=False, use_past_in_inputs=False
    )
