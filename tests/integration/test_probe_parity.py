"""The ONNX probe equals HF transformers eager (fp32, every layer), batched equals alone."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import sago_fast
from sago_fast.checkpoints.tiny import ARCHITECTURES
from sago_fast.exporters.optimised_graph import saved_graph_path

TEXTS = [
    "What is 12 + 7?",
    "Options: A. red B. green C. blue D. yellow. Which colour is the sky? The answer is",
    "a",
    "Reverse the word 'stone'.",
]
TOL = 1e-4


def hf_eager_reference(checkpoint, text):
    """HF eager on the tokenizer's default encoding of one text, pooled the same way."""
    tok = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32, attn_implementation="eager")
    enc = tok(text, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_hidden_states=True)
    hidden = torch.stack(out.hidden_states)[:, 0]  # (layers + 1, seq, d)
    return (
        hidden[:, -1].numpy(),
        hidden.mean(1).numpy(),
        torch.log_softmax(out.logits[0, -1].float(), -1).numpy(),
    )


def test_every_architecture_is_tested():
    assert set(ARCHITECTURES.names()) >= {"llama", "mistral", "qwen2", "gpt2", "phi3", "gemma", "gpt_neox"}


@pytest.mark.parametrize("arch", ARCHITECTURES.names())
def test_probe_matches_hf_eager_and_alone(arch, checkpoints, cache_dir):
    model = sago_fast.load_model(checkpoints[arch], device="cpu", cache_dir=cache_dir)
    batched = model.probe(TEXTS)
    n_layers = AutoModelForCausalLM.from_pretrained(checkpoints[arch]).config.num_hidden_layers
    assert batched.hidden_last.shape == (n_layers + 1, len(TEXTS), model.d_model)
    assert batched.hidden_mean.dtype == np.float32 and batched.next_logprobs.dtype == np.float32
    for i, text in enumerate(TEXTS):
        ref_last, ref_mean, ref_logp = hf_eager_reference(checkpoints[arch], text)
        np.testing.assert_allclose(batched.hidden_last[:, i], ref_last, atol=TOL, rtol=0)
        np.testing.assert_allclose(batched.hidden_mean[:, i], ref_mean, atol=TOL, rtol=0)
        np.testing.assert_allclose(batched.next_logprobs[i], ref_logp, atol=TOL, rtol=0)
        alone = model.probe([text])
        np.testing.assert_allclose(batched.hidden_last[:, i], alone.hidden_last[:, 0], atol=TOL, rtol=0)
        np.testing.assert_allclose(batched.hidden_mean[:, i], alone.hidden_mean[:, 0], atol=TOL, rtol=0)
        np.testing.assert_allclose(batched.next_logprobs[i], alone.next_logprobs[0], atol=TOL, rtol=0)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_pooled_outputs_have_no_sequence_axis(arch, checkpoints, cache_dir):
    model = sago_fast.load_model(checkpoints[arch], cache_dir=cache_dir)
    saved = saved_graph_path(model.exported.model_path)  # ONNX Runtime's optimised copy of it
    assert [p.name for p in model.exported.path.glob("*.onnx") if p != saved] == ["model.onnx"]  # one graph
    graph = onnx.load(str(model.exported.model_path), load_external_data=False).graph
    shapes = {
        o.name: [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim] for o in graph.output
    }
    assert {"hidden_last", "hidden_mean", "next_logprobs", "target_logprobs", "next_tokens"} <= set(shapes)
    assert shapes["hidden_last"] == [model.n_layers + 1, "batch_size", model.d_model]
    assert shapes["hidden_mean"] == [model.n_layers + 1, "batch_size", model.d_model]
    assert shapes["next_logprobs"] == ["batch_size", model.exported.manifest["vocab_size"]]
    assert shapes["target_logprobs"] == ["batch_size", "target_length"]
    assert shapes["target_best"] == ["batch_size", "target_length"]


def test_small_token_budget_gives_same_numbers(checkpoints, cache_dir):
    """Many tiny batches (bucketing, reordering) give the same numbers as one big batch."""
    from sago_fast.runtime.batching import BatchPolicy

    model = sago_fast.load_model(checkpoints["qwen2"], cache_dir=cache_dir)
    big = model.probe(TEXTS * 3)
    model.engine.batch_policy = BatchPolicy(token_budget=24, max_batch=2)
    small = model.probe(TEXTS * 3)
    np.testing.assert_allclose(big.hidden_mean, small.hidden_mean, atol=TOL)
    np.testing.assert_allclose(big.next_logprobs, small.next_logprobs, atol=TOL)


def test_no_reduction_drops_an_axis_that_may_be_empty(checkpoints, cache_dir):
    """With nothing to score (target_ids of width 0) a reduction over the targets' axis must keep it:
    ONNX Runtime's CUDA ReduceSum refuses to drop an empty axis (seen on an H200, 2026-12-04), where the CPU
    kernel returns 0. Every ReduceSum downstream of target_ids keeps its dims."""
    import onnx

    import sago_fast

    with sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir) as model:
        graph = onnx.load(str(model.exported.model_path), load_external_data=False).graph
    reached, frontier = {"target_ids"}, ["target_ids"]
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    reductions = []
    while frontier:
        for node in consumers.get(frontier.pop(), []):
            if node.op_type == "ReduceSum":
                reductions.append(node)
            for out in node.output:
                if out not in reached:
                    reached.add(out)
                    frontier.append(out)
    keepdims = [next((a.i for a in n.attribute if a.name == "keepdims"), 1) for n in reductions]
    assert reductions and all(keepdims), [n.name for n, k in zip(reductions, keepdims, strict=True) if not k]


def test_only_what_the_axes_read_leaves_the_session(checkpoints, cache_dir):
    """A probe asks ONNX Runtime for its pooled outputs and log-probs only: the KV cache (present.*) is never
    copied out (on CUDA, off the device); scoring options asks for it on the prefill it continues from."""
    import sago_fast

    with sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir) as model:
        asked: list[list[str]] = []
        run = model.session.run
        model.session.run = lambda names, feeds, *a: asked.append(list(names)) or run(names, feeds, *a)
        ids = model.tokenize(["What is 2 + 3?", "Which is larger, 41 or 14?"])
        model.probe_ids(ids)
        assert asked and not [n for names in asked for n in names if n.startswith("present.")]
        assert {"hidden_last", "hidden_mean", "next_logprobs"} <= set(asked[0])
        asked.clear()
        model.prefill(ids, [[[5], [6, 7]], [[8, 9], [10]]])
        assert any(n.startswith("present.") for n in asked[0])  # the prefill the options continue from
        assert not [n for names in asked[1:] for n in names if n.startswith("present.")]
