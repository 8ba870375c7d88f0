"""The one graph of a checkpoint: prefill, option scoring on a cached prefix, and greedy steps.

Inputs:   input_ids                (batch, new) int64          new tokens, left-padded within the block
          attention_mask           (batch, past + new) int64   1 for every real token (holes allowed)
          past_key_values.{i}.key  (batch, kv_heads, past, head_dim) float   past = 0 for a prefill
          past_key_values.{i}.value
          target_ids               (batch, T) int64            tokens to score: the last T new tokens
          segment_ids              (batch, past + new) int64   0 everywhere but in option blocks (below);
                                                               only in graphs of block-capable models
Outputs:  next_tokens              (batch,) int64              greedy (first arg-max) next token
          next_logprob             (batch,) float32            its log-probability
          present.{i}.key          (batch, kv_heads, past + new, head_dim)
          present.{i}.value
          hidden_last              (n_layers + 1, batch, d_model) float32  hidden state at the last new token
          hidden_mean              (n_layers + 1, batch, d_model) float32  masked mean over the new tokens
          next_logprobs            (batch, vocab) float32      log-softmax of the last position's logits
          target_logprobs          (batch, T) float32          log P(target_ids[:, j]) given everything
                                                               before the j-th of the last T new tokens
          target_best              (batch, T) int64            the first arg-max of that distribution:
                                                               target j is greedy where they are equal

One pass over a prompt (past = 0) yields the pooled hidden states of every layer, the next-token
distribution and the KV cache; option continuations are then scored on top of that cache, and greedy
generation continues from it, through the same graph (so the weights are stored and loaded once).
Position ids are ``cumsum(mask) - 1`` over past + new, taken for the new columns: left padding, holes
between the cached prefix and a left-padded continuation, and single decode steps all get the positions
each row would have alone. Only (batch, T) target log-probs leave the graph, never (batch, seq, vocab).

Option blocks (``segment_ids``): a new token of segment s > 0 sees the real past tokens, the real tokens of
segment 0 and those of its own segment before it, nothing else; positions count what it sees. So the
options of a prompt, concatenated after its cache with segments 1, 2, ..., are each scored as if alone,
in one row of one pass (no copy of the prompt's cache per option). All zeros is the plain causal graph.
The graph builds this 4-D mask itself and hands it to the model, replacing the model's own mask: models
whose attention is not a plain mask over positions (ALiBi, sliding windows) get the graph without it.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import torch
from optimum.exporters.onnx.model_patcher import ModelPatcher, preprocess_past_key_values

from sago_fast.exporters.pooled import TASK, base_onnx_config_class

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def _last_columns(values: torch.Tensor, new_ids: torch.Tensor) -> torch.Tensor:
    """values[:, -new:] where new = new_ids.shape[1], built from tensors so the exported slice stays
    dynamic. values: (batch, past + new); new_ids: (batch, new)."""
    total = torch.ones_like(values[0]).sum()
    offsets = torch.ones_like(new_ids[0]).cumsum(0) - 1  # (new,) 0..new-1
    new = torch.ones_like(new_ids[0]).sum()
    index = (offsets + (total - new)).unsqueeze(0).expand(values.shape[0], -1)  # (batch, new)
    return torch.gather(values, 1, index)


def takes_segments(config: Any) -> bool:
    """Whether a model's graph can take ``segment_ids``: its attention must be a plain mask over token
    positions, which the graph's 4-D mask replaces. Not ALiBi (the bias is built from the 2-D mask) nor
    sliding-window or mixed layer types (the window would be lost)."""
    if getattr(config, "alibi", False) or config.model_type in ("bloom", "mpt"):
        return False
    if getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True):
        return False
    return all(kind == "full_attention" for kind in getattr(config, "layer_types", None) or ())


def block_attention(
    mask: torch.Tensor, segments: torch.Tensor, input_ids: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch, 1, new, past + new) additive attention mask and (batch, new) position ids of the segment
    rule (module docstring). mask, segments: (batch, past + new); input_ids: (batch, new)."""
    columns = (torch.ones_like(mask[0]).cumsum(0) - 1).unsqueeze(0)  # (1, past + new)
    query_columns = _last_columns(columns, input_ids).unsqueeze(2)  # (1, new, 1)
    query_segments = _last_columns(segments, input_ids).unsqueeze(2)  # (batch, new, 1)
    key_segments = segments.unsqueeze(1)  # (batch, 1, past + new)
    sees = (
        (columns.unsqueeze(1) <= query_columns)
        & ((key_segments == query_segments) | (key_segments == 0))
        & mask.unsqueeze(1).bool()
    )  # (batch, new, past + new)
    positions = (sees.sum(-1) - 1).clamp(min=0)  # (batch, new)
    sees = sees | (columns.unsqueeze(1) == query_columns)  # a padding row sees itself: none fully masked
    blocked = torch.full((), torch.finfo(dtype).min, dtype=dtype)
    additive = torch.where(sees, torch.zeros((), dtype=dtype), blocked)
    return additive.unsqueeze(1), positions


def unified_forward(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    past_key_values: Any,
    target_ids: torch.Tensor,
    with_past: bool = True,
    segment_ids: torch.Tensor | None = None,
) -> dict[str, Any]:
    """The graph's computation (see the module docstring); also the eager reference in tests.

    with_past=False: the graph of an architecture whose cached graph cannot be exported (no past inputs,
    no present outputs: prefills and whole-sequence scoring only). The model class's own ``forward`` is
    called, not Optimum's re-wrapped one: with transformers >= 4.54 the re-wrapped forward returns the
    *pre-norm* residual as the last hidden state, while HF eager returns it after the final norm.
    segment_ids: (batch, past + new), the option-block rule of the module docstring (a 4-D mask built
    here); None: the model's own mask from the 2-D one."""
    mask = attention_mask.to(torch.int64)  # (batch, past + new)
    new = torch.ones_like(input_ids[0]).sum()
    new_mask = _last_columns(mask, input_ids)  # (batch, new)
    model_mask: torch.Tensor = mask
    if segment_ids is None:
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (batch, past + new)
        position_ids = _last_columns(positions, input_ids)  # (batch, new)
    else:
        dtype = model.get_output_embeddings().weight.dtype
        model_mask, position_ids = block_attention(mask, segment_ids.to(torch.int64), input_ids, dtype)
    kwargs: dict[str, Any] = {
        "input_ids": input_ids,
        "attention_mask": model_mask,
        "position_ids": position_ids,
        "past_key_values": preprocess_past_key_values(past_key_values) if past_key_values else None,
        "use_cache": with_past,
        "output_hidden_states": True,
        "return_dict": True,
    }
    forward = type(model).forward
    if "logits_to_keep" in inspect.signature(forward).parameters:
        kwargs["logits_to_keep"] = 1
    out = forward(model, **kwargs)
    logits = out.logits[:, -1, :].to(torch.float32)  # (batch, vocab)
    next_logprobs = torch.log_softmax(logits, dim=-1)
    best = torch.argmax(next_logprobs, dim=-1)  # (batch,) first maximum, as torch greedy decoding picks

    keep = new_mask.unsqueeze(-1).bool()  # (batch, new, 1)
    count = new_mask.sum(-1, keepdim=True).clamp(min=1).to(torch.float32)  # (batch, 1)
    last, mean = [], []
    for hidden in out.hidden_states:  # n_layers + 1 tensors of (batch, new, d_model)
        h32 = hidden.to(torch.float32)
        last.append(h32[:, -1, :])
        # where(), not multiply: padded rows may hold NaN in some attention kernels and NaN * 0 = NaN
        mean.append(torch.where(keep, h32, torch.zeros_like(h32)).sum(1) / count)

    # target j is predicted at new position (new - T - 1 + j)
    final = out.hidden_states[-1]  # (batch, new, d_model), after the final norm
    t_offsets = torch.ones_like(target_ids[0]).cumsum(0) - 1  # (T,) 0..T-1
    # (1,), not a scalar: CUDA's ReduceSum refuses to drop an empty axis (T = 0: nothing to score)
    n_targets = torch.ones_like(target_ids[0]).sum(0, keepdim=True)
    index = (t_offsets + (new - n_targets - 1)).view(1, -1, 1).expand(final.shape[0], -1, final.shape[2])
    scoring = torch.gather(final, 1, index)  # (batch, T, d_model)
    target_logits = model.get_output_embeddings()(scoring).to(torch.float32)  # (batch, T, vocab)
    target_all = torch.log_softmax(target_logits, -1)  # (batch, T, vocab)
    target_logp = torch.gather(target_all, 2, target_ids.unsqueeze(-1)).squeeze(-1)
    # lm-eval's is_greedy takes the arg-max of the log-softmax (ties after the shift included)
    target_best = torch.argmax(target_all, dim=-1)  # (batch, T)

    result: dict[str, Any] = {
        "next_tokens": best,
        "next_logprob": torch.gather(next_logprobs, 1, best.unsqueeze(-1)).squeeze(-1),
    }
    if with_past:
        result["past_key_values"] = _legacy(out.past_key_values)
    return {
        **result,
        "hidden_last": torch.stack(last),
        "hidden_mean": torch.stack(mean),
        "next_logprobs": next_logprobs,
        "target_logprobs": target_logp,
        "target_best": target_best,
    }


def pooled_forward(
    model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """hidden_last, hidden_mean and next_logprobs of a left-padded batch: the graph's prefill computation
    run eagerly in torch (the reference engine of ``sago bench`` and the GPU tests)."""
    targets = input_ids[:, :0]  # nothing to score
    out = unified_forward(model, input_ids, attention_mask, None, targets, with_past=False)
    return {name: out[name] for name in ("hidden_last", "hidden_mean", "next_logprobs")}


def _legacy(cache: Any) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    legacy = cache.to_legacy_cache() if hasattr(cache, "to_legacy_cache") else cache
    return tuple((key, value) for key, value in legacy)


def cache_like(
    model: PreTrainedModel, batch: int, past: int
) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """Random past key/values shaped exactly as ``model`` caches them (found by running it once).

    Optimum's generators shape the past from the config, which is wrong for some layouts: Falcon's new
    decoder architecture caches keys broadcast to all attention heads, not ``num_kv_heads``."""
    generator = torch.Generator().manual_seed(0)
    vocab = int(model.get_output_embeddings().weight.shape[0])
    ids = torch.randint(0, vocab, (batch, past), generator=generator)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
    return tuple(
        (
            torch.randn(k.shape, generator=generator).to(k.dtype),
            torch.randn(v.shape, generator=generator).to(v.dtype),
        )
        for k, v in _legacy(out.past_key_values)
    )


class UnifiedPatcher(ModelPatcher):
    """Replaces Optimum's patched forward by :func:`unified_forward` (keeps Optimum's op patches)."""

    def __init__(
        self, config: Any, model: PreTrainedModel, model_kwargs: dict[str, Any] | None = None
    ) -> None:
        super().__init__(config, model, model_kwargs)

        def patched_forward(
            input_ids: torch.Tensor,
            attention_mask: torch.Tensor,
            past_key_values: Any = None,
            target_ids: torch.Tensor | None = None,
            segment_ids: torch.Tensor | None = None,
            **_: Any,
        ) -> Any:
            with_past = bool(getattr(config, "use_past_in_inputs", True))
            targets = target_ids if target_ids is not None else input_ids[:, :0]
            return unified_forward(
                model, input_ids, attention_mask, past_key_values, targets, with_past, segment_ids
            )

        self.patched_forward = patched_forward


def unified_config(model: PreTrainedModel, float_dtype: str = "fp32", with_past: bool = True) -> Any:
    """OnnxConfig of the unified graph (inputs/outputs in the module docstring); ``with_past=False``:
    without past inputs and present outputs."""
    base = base_onnx_config_class(model)
    segments = with_past and takes_segments(model.config)

    class UnifiedOnnxConfig(base):  # type: ignore[misc, valid-type]
        _MODEL_PATCHER = UnifiedPatcher

        @property
        def inputs(self) -> dict[str, dict[int, str]]:
            common: dict[str, dict[int, str]] = OrderedDict(
                input_ids={0: "batch_size", 1: "sequence_length"},
                attention_mask={0: "batch_size", 1: "past_sequence_length + sequence_length"},
            )
            if self.use_past_in_inputs:
                self.add_past_key_values(common, direction="inputs")
            if not getattr(self, "_base_dummies", False):
                common["target_ids"] = {0: "batch_size", 1: "target_length"}
                if segments:
                    common["segment_ids"] = {0: "batch_size", 1: "past_sequence_length + sequence_length"}
            return common

        @property
        def outputs(self) -> dict[str, dict[int, str]]:
            common: dict[str, dict[int, str]] = OrderedDict(
                next_tokens={0: "batch_size"}, next_logprob={0: "batch_size"}
            )
            if self.use_past_in_inputs:
                self.add_past_key_values(common, direction="outputs")
            common["hidden_last"] = {1: "batch_size"}
            common["hidden_mean"] = {1: "batch_size"}
            common["next_logprobs"] = {0: "batch_size"}
            common["target_logprobs"] = {0: "batch_size", 1: "target_length"}
            common["target_best"] = {0: "batch_size", 1: "target_length"}
            return common

        def generate_dummy_inputs(self, framework: str = "pt", **kwargs: Any) -> dict[str, Any]:
            self._base_dummies = True  # Optimum has no generator for target_ids: built below
            try:
                dummy = super().generate_dummy_inputs(framework, **kwargs)
            finally:
                self._base_dummies = False
            # Left-pad one row and leave a hole after the past: tracing must take the padded-mask branch
            mask = torch.ones_like(dummy["attention_mask"])
            mask[0, : max(1, mask.shape[1] // 4)] = 0
            ids = dummy["input_ids"]
            inputs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}  # the forward's order
            if self.use_past_in_inputs:
                mask[1, mask.shape[1] - ids.shape[1]] = 0  # a left-padded new block after a cached prefix
                past = mask.shape[1] - ids.shape[1]
                inputs["past_key_values"] = cache_like(model, ids.shape[0], past)
            inputs["target_ids"] = ids[:, -3:].clone()
            if segments:  # two option blocks at the end of the second row
                inputs["segment_ids"] = torch.zeros_like(mask)
                inputs["segment_ids"][1, -4:] = torch.tensor([1, 1, 2, 2])
            return inputs

        def ordered_inputs(self, model: PreTrainedModel) -> dict[str, dict[int, str]]:
            return self.inputs

    UnifiedOnnxConfig.__name__ = f"Unified{base.__name__}"
    return UnifiedOnnxConfig(
        model.config, task=TASK, float_dtype=float_dtype, use_past=with_past, use_past_in_inputs=with_past
    )
