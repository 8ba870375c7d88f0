"""Grouped-query attention that reads the keys and values where they lie, for the exported graph.

transformers' eager attention repeats every key/value head for the query heads that share it
(``repeat_kv``): in the exported graph that is an ``Expand`` copying the whole KV cache, past included, to
``n_heads / n_kv_heads`` times its size on every call. In a decode step that copy is most of the work: on
the 2-core development machine, SmolLM2-135M (9 query heads over 3 KV heads), 8 rows on an 800-position
cache, ``Expand`` took 30% of the step's node time against 19% for the linear layers
(``benchmarks/profile_ort_ops.py --batch 8 --tokens 1 --past 800``).

Here the query heads of a group are stacked along the query axis instead: queries (B, kv, n_rep * T, d)
against keys (B, kv, d, P) give the same dot products, and the weights (B, kv, n_rep * T, P) multiply the
values (B, kv, P, d) as they are. Query head ``h`` belongs to KV head ``h // n_rep``, as in ``repeat_kv``.
The mask and the softmax are applied per query head, as eager does.

Only for model types whose own eager attention is exactly this computation with ``repeat_kv``
(:data:`GROUPED_MODEL_TYPES`); others (soft-capped logits, attention sinks, ...) export with ``eager``.
"""

from __future__ import annotations

from typing import Any

GROUPED_ATTENTION = "sago_grouped"
GROUPED_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2"})


def grouped_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float,
    dropout: float = 0.0,
    **_: Any,
) -> tuple[Any, Any]:
    """transformers' attention-function signature: query (B, H, T, d), key / value (B, kv, P, d), mask
    (B, 1, T, P) additive or None. Returns the output (B, T, H, d) and the weights (B, H, T, P)."""
    import torch

    batch, heads, new, dim = query.shape
    kv_heads = key.shape[1]
    grouped = query.reshape(batch, kv_heads, -1, dim)  # (B, kv, n_rep * T, d): heads of a group stacked
    scores = torch.matmul(grouped, key.transpose(2, 3)) * scaling  # (B, kv, n_rep * T, P)
    scores = scores.reshape(batch, heads, new, -1)  # (B, H, T, P)
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, :, : key.shape[-2]]
    weights = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(weights.reshape(batch, kv_heads, -1, weights.shape[-1]), value)  # (B, kv, n_rep*T, d)
    return out.reshape(batch, heads, new, dim).transpose(1, 2).contiguous(), weights


def _eager_mask(*args: Any, **kwargs: Any) -> Any:
    """Whatever builds eager attention's masks when called: Optimum's export swaps in a version without
    ``vmap`` (which the tracer cannot follow) under the name "eager" while it exports."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    return ALL_MASK_ATTENTION_FUNCTIONS["eager"](*args, **kwargs)


def attention_for(model_type: str, config: Any) -> str:
    """The attention implementation the export loads ``config``'s model with: the grouped one where the
    model type's eager attention repeats KV heads (:data:`GROUPED_MODEL_TYPES`) and it has fewer KV heads
    than query heads, else ``eager``. Registers the grouped one with transformers, with eager's masks
    (an attention function transformers has no mask function for gets no mask at all)."""
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if model_type not in GROUPED_MODEL_TYPES or not heads or kv_heads == heads:
        return "eager"
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(GROUPED_ATTENTION, grouped_attention)
    AttentionMaskInterface.register(GROUPED_ATTENTION, _eager_mask)
    return GROUPED_ATTENTION
