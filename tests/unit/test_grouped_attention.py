"""Grouped-query attention without repeated KV heads equals transformers' eager attention."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.llama.modeling_llama import eager_attention_forward

import sago_fast
from sago_fast.exporters.grouped_attention import GROUPED_ATTENTION, attention_for, grouped_attention


class _Module(torch.nn.Module):
    def __init__(self, groups: int) -> None:
        super().__init__()
        self.num_key_value_groups = groups


@pytest.mark.parametrize(("heads", "kv_heads"), [(6, 2), (9, 3), (4, 4)])
def test_grouped_attention_equals_eager(heads, kv_heads):
    """Queries on a cache longer than themselves, an additive mask with holes (left padding): the same
    output and weights as eager's repeat_kv formulation, within float32 rounding."""
    gen = torch.Generator().manual_seed(0)
    batch, new, past, dim = 2, 5, 11, 8
    query = torch.randn(batch, heads, new, dim, generator=gen)
    key = torch.randn(batch, kv_heads, past, dim, generator=gen)
    value = torch.randn(batch, kv_heads, past, dim, generator=gen)
    mask = torch.zeros(batch, 1, new, past)
    mask[0, :, :, :3] = torch.finfo(torch.float32).min  # row 0: three padded positions
    mask[:, :, torch.arange(new)[:, None] + past - new < torch.arange(past)[None, :]] = torch.finfo(
        torch.float32
    ).min  # causal over the new positions
    module = _Module(heads // kv_heads).eval()
    ours = grouped_attention(module, query, key, value, mask, scaling=dim**-0.5)
    theirs = eager_attention_forward(module, query, key, value, mask, scaling=dim**-0.5)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6, rtol=1e-5)


def test_grouped_attention_is_chosen_for_repeated_kv_heads_only():
    class Config:
        num_attention_heads, num_key_value_heads = 9, 3

    assert attention_for("llama", Config) == GROUPED_ATTENTION
    assert attention_for("qwen2", Config) == GROUPED_ATTENTION
    assert attention_for("gemma2", Config) == "eager"  # its eager attention soft-caps: not this one
    Config.num_key_value_heads = 9
    assert attention_for("llama", Config) == "eager"  # nothing repeated, nothing to gain


def test_the_exported_graph_does_not_copy_the_cache_per_query_head(checkpoints, cache_dir):
    """The tiny Llama (4 query heads over 2 KV heads): no Expand reads a layer's keys or values (eager's
    repeat_kv made two a layer), and the graph still equals HF eager (test_probe_parity)."""
    import onnx

    model = sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir)
    graph = onnx.load(str(model.exported.model_path), load_external_data=False).graph
    expands = [n.name for n in graph.node if n.op_type == "Expand"]
    assert expands and not [name for name in expands if "self_attn" in name]  # the mask's only
