"""Rotary position embeddings as one ONNX Runtime node per rotation, for the exported graph.

transformers applies RoPE as ``q * cos + rotate_half(q) * sin``: traced, that is two Slices, a Neg, a
Concat, two Muls and an Add for each of the queries and keys of every layer (~420 nodes for a 30-layer
model), which took ~6% of a prefill's node time on 2 CPU cores (SmolLM2-135M, 8 x 110 tokens:
``benchmarks/profile_ort_ops.py``). ONNX Runtime's ``com.microsoft::RotaryEmbedding`` does the same
rotation in one kernel (CPU and CUDA).

That kernel reads cos/sin from a table by position id; here the table is the model's own per-token cos/sin
of the call (its rotary module's output, any RoPE scaling included) flattened to (batch * new, head_dim / 2)
rows, and token (b, s) reads row ``b * new + s``. So what is rotated, and by which angles, is exactly
what the model computes; only the arithmetic moves into one node.

Only for the model types whose ``apply_rotary_pos_emb`` is the plain half-split rotation of the whole head
(:data:`ROTARY_MODEL_TYPES`), and only while exporting (:func:`fused_rotary`): eager runs of the model are
untouched.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedModel

ROTARY_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2"})
ROTARY_FUNCTION = "apply_rotary_pos_emb"  # the modelling module's function the attention calls


def _rotate(states: Any, cos: Any, sin: Any) -> Any:
    """HF's rotation of states (B, H, S, D) by cos/sin (B, S, D) with transformers' own ``rotate_half``
    (the same in every model type of :data:`ROTARY_MODEL_TYPES`): the eager computation of the node."""
    from transformers.models.llama.modeling_llama import rotate_half

    return states * cos.unsqueeze(1) + rotate_half(states) * sin.unsqueeze(1)


@functools.cache
def _rotary_function() -> Any:
    """The autograd function whose trace is the node (made once, on first use: torch only when exporting)."""
    import torch

    class RotaryNode(torch.autograd.Function):
        """Forward: HF's rotation (what tracing runs); symbolic: ONNX Runtime's RotaryEmbedding node."""

        @staticmethod
        def forward(  # type: ignore[override]
            ctx: Any, states: Any, rows: Any, cos_rows: Any, sin_rows: Any, cos: Any, sin: Any
        ) -> Any:
            return _rotate(states, cos, sin)

        @staticmethod
        def symbolic(g: Any, states: Any, rows: Any, cos_rows: Any, sin_rows: Any, cos: Any, sin: Any) -> Any:
            rotated = g.op(
                "com.microsoft::RotaryEmbedding", states, rows, cos_rows, sin_rows, interleaved_i=0
            )
            rotated.setType(states.type())  # same shape and type as the input
            return rotated

    return RotaryNode


def rotary_node_apply(
    q: Any, k: Any, cos: Any, sin: Any, position_ids: Any = None, unsqueeze_dim: int = 1
) -> Any:
    """``apply_rotary_pos_emb``'s signature: q (B, H, S, D), k (B, kv, S, D), cos/sin (B, S, D) with the
    angles of the first D/2 dimensions repeated in the second half. Returns the rotated (q, k)."""
    import torch

    if unsqueeze_dim != 1:
        raise ValueError("the fused rotation takes heads on axis 1 only")
    half = cos.shape[-1] // 2
    cos_rows = cos[..., :half].reshape(-1, half)  # (B * S, D / 2): the table the node reads
    sin_rows = sin[..., :half].reshape(-1, half)
    ones = torch.ones_like(cos_rows[:, 0], dtype=torch.int64)  # (B * S,)
    rows = (ones.cumsum(0) - 1).reshape(cos.shape[0], cos.shape[1])  # (B, S): token (b, s) reads b * S + s
    node = _rotary_function()
    return tuple(node.apply(states, rows, cos_rows, sin_rows, cos, sin) for states in (q, k))


@contextlib.contextmanager
def fused_rotary(model: PreTrainedModel) -> Iterator[bool]:
    """While exporting ``model``: its modelling module's ``apply_rotary_pos_emb`` emits one
    RotaryEmbedding node per rotation. Yields whether it does (model types outside
    :data:`ROTARY_MODEL_TYPES` export as they are)."""
    module = sys.modules.get(type(model).__module__)
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in ROTARY_MODEL_TYPES or module is None or not hasattr(module, ROTARY_FUNCTION):
        yield False
        return
    original = getattr(module, ROTARY_FUNCTION)
    setattr(module, ROTARY_FUNCTION, rotary_node_apply)
    try:
        yield True
    finally:
        setattr(module, ROTARY_FUNCTION, original)
