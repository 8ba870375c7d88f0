"""Rotary embeddings as ONNX Runtime's RotaryEmbedding node: the node's table trick equals transformers'
rotation, the export uses it for llama-like models only, and the patch is gone after the export."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama import modeling_llama
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

import sago_fast
from sago_fast.exporters.fused_rotary import fused_rotary, rotary_node_apply


def _angles(batch: int, new: int, dim: int, rope_scaling: dict | None = None) -> tuple[torch.Tensor, ...]:
    config = LlamaConfig(hidden_size=dim * 2, num_attention_heads=2, rope_scaling=rope_scaling)
    left_padded = [0] * (new - 2) + [1, 2]  # padded positions clamp to 0, as the graph's cumsum - 1 does
    positions = torch.tensor([left_padded, list(range(40, 40 + new))])[:batch]
    return LlamaRotaryEmbedding(config)(torch.zeros(batch, new, dim * 2), positions)


@pytest.mark.parametrize("rope_scaling", [None, {"rope_type": "linear", "factor": 4.0}])
def test_the_node_rotation_equals_transformers(rope_scaling):
    """Left-padded and far positions, 4 query heads over 2 KV heads, plain and scaled RoPE: the same q and k
    as transformers' apply_rotary_pos_emb (the eager computation the exported node replaces)."""
    gen = torch.Generator().manual_seed(0)
    batch, new, dim = 2, 5, 16
    cos, sin = _angles(batch, new, dim, rope_scaling)
    q = torch.randn(batch, 4, new, dim, generator=gen)
    k = torch.randn(batch, 2, new, dim, generator=gen)
    ours = rotary_node_apply(q, k, cos, sin)
    theirs = apply_rotary_pos_emb(q, k, cos, sin)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6, rtol=1e-6)


def test_the_nodes_table_rows_equal_onnx_runtimes_kernel():
    """The table the exported node reads (per-token cos/sin rows, token (b, s) at row b * new + s) gives
    ONNX Runtime's RotaryEmbedding kernel the same result as transformers' rotation."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    batch, heads, new, dim = 2, 3, 5, 8
    cos, sin = _angles(batch, new, dim)
    states = torch.randn(batch, heads, new, dim, generator=torch.Generator().manual_seed(1))
    node = helper.make_node("RotaryEmbedding", ["x", "rows", "cos", "sin"], ["y"], domain="com.microsoft")
    floats = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("x", "cos", "sin")]
    rows_info = helper.make_tensor_value_info("rows", TensorProto.INT64, None)
    graph = helper.make_graph(
        [node], "rotary", [floats[0], rows_info, *floats[1:]], [helper.make_tensor_value_info("y", 1, None)]
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    session = ort.InferenceSession(
        helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString(),
        providers=["CPUExecutionProvider"],
    )
    half = dim // 2
    (rotated,) = session.run(
        None,
        {
            "x": states.numpy(),
            "rows": np.arange(batch * new, dtype=np.int64).reshape(batch, new),
            "cos": cos[..., :half].reshape(-1, half).numpy(),
            "sin": sin[..., :half].reshape(-1, half).numpy(),
        },
    )
    expected, _ = apply_rotary_pos_emb(states, states, cos, sin)
    np.testing.assert_allclose(rotated, expected.numpy(), atol=1e-6, rtol=1e-5)


def test_the_patch_is_only_in_place_while_exporting():
    class Model:
        config = LlamaConfig()

    Model.__module__ = modeling_llama.__name__
    original = modeling_llama.apply_rotary_pos_emb
    with fused_rotary(Model()) as fused:
        assert fused and modeling_llama.apply_rotary_pos_emb is rotary_node_apply
    assert modeling_llama.apply_rotary_pos_emb is original
    with pytest.raises(RuntimeError), fused_rotary(Model()):  # a failed export restores it too
        raise RuntimeError("the export failed")
    assert modeling_llama.apply_rotary_pos_emb is original
    Model.config = LlamaConfig()
    Model.config.model_type = "phi3"  # its rotation may be partial: not this node
    with fused_rotary(Model()) as fused:
        assert not fused and modeling_llama.apply_rotary_pos_emb is original


def test_llama_graphs_rotate_in_one_node_and_gpt2_graphs_have_none(checkpoints, cache_dir):
    """The tiny Llama's graph: one RotaryEmbedding for the queries and one for the keys of each layer and no
    Neg left of rotate_half (it still equals HF eager: test_probe_parity); GPT-2 (learned positions): none."""
    rotations = {}
    for name in ("llama", "gpt2"):
        model = sago_fast.load_model(checkpoints[name], cache_dir=cache_dir)
        graph = onnx.load(str(model.exported.model_path), load_external_data=False).graph
        rotations[name] = [n for n in graph.node if n.op_type == "RotaryEmbedding"]
        negs = [n for n in graph.node if n.op_type == "Neg"]
        layers = model.n_layers
        model.close()
        if name == "llama":
            assert len(rotations[name]) == 2 * layers and not negs
    assert rotations["gpt2"] == []
