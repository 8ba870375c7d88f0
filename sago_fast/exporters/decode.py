"""The decode graph: one greedy step with a KV cache, for generation through ONNX Runtime.

Inputs:   input_ids                (batch, new) int64          new tokens (the prompt at the first step)
          attention_mask           (batch, past + new) int64   left-padded, 1 for every real token
          past_key_values.{i}.key  (batch, kv_heads, past, head_dim) float   past = 0 at the first step
          past_key_values.{i}.value
Outputs:  next_tokens              (batch,) int64              greedy (first arg-max) next token
          next_logprob             (batch,) float32            its log-probability
          present.{i}.key          (batch, kv_heads, past + new, head_dim)
          present.{i}.value

One graph serves the prompt step (empty past) and every later step. Position ids are computed inside
the graph from the mask, exactly as HF ``generate`` does (``cumsum(mask) - 1``), so a left-padded batch
generates what each prompt generates alone. Only the chosen token leaves the graph, never the
(batch, vocab) logits.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from typing import Any

import torch
from optimum.exporters.onnx.model_patcher import ModelPatcher, preprocess_past_key_values

from sago_fast.exporters.pooled import TASK, base_onnx_config_class


def decode_forward(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, past_key_values: Any
) -> dict[str, Any]:
    """One greedy step: the model's own forward on new tokens given a legacy (key, value) cache."""
    mask = attention_mask.to(torch.int64)  # (batch, past + new)
    # positions of the last `new` columns of cumsum(mask) - 1, built from tensors so the trace stays dynamic
    new = torch.ones_like(input_ids[0]).sum()
    offsets = torch.ones_like(input_ids[0]).cumsum(0)  # (new,) 1..new
    real = mask.sum(-1, keepdim=True)  # (batch, 1)
    position_ids = (real - new + offsets.unsqueeze(0) - 1).clamp(min=0)  # (batch, new)
    kwargs: dict[str, Any] = {
        "input_ids": input_ids,
        "attention_mask": mask,
        "position_ids": position_ids,
        "past_key_values": preprocess_past_key_values(past_key_values),
        "use_cache": True,
        "return_dict": True,
    }
    forward = type(model).forward
    if "logits_to_keep" in inspect.signature(forward).parameters:
        kwargs["logits_to_keep"] = 1
    out = forward(model, **kwargs)
    logits = out.logits[:, -1, :].to(torch.float32)  # (batch, vocab)
    logp = torch.log_softmax(logits, dim=-1)
    best = torch.argmax(logp, dim=-1)  # (batch,) first maximum, as torch greedy decoding picks
    cache = out.past_key_values
    legacy = cache.to_legacy_cache() if hasattr(cache, "to_legacy_cache") else cache
    return {
        "next_tokens": best,
        "next_logprob": torch.gather(logp, 1, best.unsqueeze(-1)).squeeze(-1),
        "past_key_values": tuple((key, value) for key, value in legacy),
    }


class DecodePatcher(ModelPatcher):
    """Replaces Optimum's patched forward by :func:`decode_forward` (keeps Optimum's op patches)."""

    def __init__(self, config: Any, model: Any, model_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__(config, model, model_kwargs)

        def patched_forward(
            input_ids: torch.Tensor, attention_mask: torch.Tensor, past_key_values: Any = None, **_: Any
        ) -> Any:
            return decode_forward(model, input_ids, attention_mask, past_key_values)

        self.patched_forward = patched_forward


def decode_config(model: Any, float_dtype: str = "fp32") -> Any:
    """OnnxConfig of the decode graph (inputs/outputs in the module docstring)."""
    base = base_onnx_config_class(model)

    class DecodeOnnxConfig(base):  # type: ignore[misc, valid-type]
        _MODEL_PATCHER = DecodePatcher

        @property
        def inputs(self) -> dict[str, dict[int, str]]:
            common: dict[str, dict[int, str]] = OrderedDict(
                input_ids={0: "batch_size", 1: "sequence_length"},
                attention_mask={0: "batch_size", 1: "past_sequence_length + sequence_length"},
            )
            self.add_past_key_values(common, direction="inputs")
            return common

        @property
        def outputs(self) -> dict[str, dict[int, str]]:
            common: dict[str, dict[int, str]] = OrderedDict(
                next_tokens={0: "batch_size"}, next_logprob={0: "batch_size"}
            )
            self.add_past_key_values(common, direction="outputs")
            return common

        def generate_dummy_inputs(self, framework: str = "pt", **kwargs: Any) -> dict[str, Any]:
            dummy = super().generate_dummy_inputs(framework, **kwargs)
            # Left-pad one row: tracing must take the padded-mask branch of every data-dependent check.
            mask = torch.ones_like(dummy["attention_mask"])
            mask[0, : max(1, mask.shape[1] // 4)] = 0
            return {
                "input_ids": dummy["input_ids"],
                "attention_mask": mask,
                "past_key_values": dummy["past_key_values"],
            }

        def ordered_inputs(self, model: Any) -> dict[str, dict[int, str]]:
            return self.inputs

    DecodeOnnxConfig.__name__ = f"Decode{base.__name__}"
    return DecodeOnnxConfig(
        model.config, task=TASK, float_dtype=float_dtype, use_past=True, use_past_in_inputs=True
    )
