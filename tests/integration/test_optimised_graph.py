"""ONNX Runtime's optimised graph kept beside an export: later sessions open it, with the same outputs."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx.external_data_helper import uses_external_data

import sago_fast
import sago_fast.runtime.model as model_module
from sago_fast.checkpoints.tiny import TinySize, build_tiny_checkpoint
from sago_fast.exporters.optimised_graph import (
    SAVED_DATA,
    GraphToOpen,
    graph_to_open,
    keep_saved_graph,
    saved_graph_path,
)
from sago_fast.runtime.session import open_session

SIZE = TinySize(max_positions=128)
PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
CONTINUATIONS = [[[20, 21], [22]], [[23, 24, 25]], [[26], [27, 28]]]
TOL = 1e-6  # the same kernels on the same shapes: equal in practice


def outputs(model):
    result = model.prefill(PROMPTS, CONTINUATIONS)
    probe = result.probe
    return [probe.hidden_last, probe.hidden_mean, probe.next_logprobs] + [
        lp for conts in result.continuation_logprobs for lp in conts
    ]


def assert_same(a, b):
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, atol=TOL, rtol=0)


def with_plain_session(model):
    """``model`` on a session ONNX Runtime optimises itself, from the export's own graph."""
    session, _ = open_session(model.exported.model_path, "cpu")
    return dataclasses.replace(model, engine=dataclasses.replace(model.engine, session=session))


def weights(path):
    """Name -> external-data reference of every initializer of ``path`` stored outside the graph."""
    graph = onnx.load(str(path), load_external_data=False).graph
    return {
        t.name: {e.key: e.value for e in t.external_data} for t in graph.initializer if uses_external_data(t)
    }


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_sessions_open_the_saved_optimised_graph_and_siblings_get_theirs(
    arch, tmp_path, tokenizer, monkeypatch
):
    opened = []
    original = model_module.open_session
    monkeypatch.setattr(
        model_module,
        "open_session",
        lambda path, *args, **kw: (opened.append((path.name, kw["optimised"])), original(path, *args, **kw))[
            1
        ],
    )
    first = build_tiny_checkpoint(arch, tmp_path / "step-1", SIZE, seed=1, tokenizer=tokenizer)
    second = build_tiny_checkpoint(arch, tmp_path / "step-2", SIZE, seed=2, tokenizer=tokenizer)
    cache = tmp_path / "cache"
    with sago_fast.load_model(first, cache_dir=cache) as model:  # optimises, and keeps what it made
        reference = outputs(model)
        entry, graph = model.exported.path, model.exported.model_path
    saved = saved_graph_path(graph)
    assert opened == [("model.onnx", False)] and saved.is_file()
    # every weight of the saved graph points at the export's own bytes: nothing is stored twice
    assert weights(saved) == weights(graph) != {}
    assert {p.name for p in entry.iterdir() if p.name.startswith(("model", "weights"))} == {
        "model.onnx",
        "model.onnx_data",
        saved.name,
    }
    n_nodes = [len(onnx.load(str(p), load_external_data=False).graph.node) for p in (graph, saved)]
    assert n_nodes[1] < n_nodes[0]  # what ONNX Runtime fused
    with sago_fast.load_model(first, cache_dir=cache) as again:
        assert opened[-1] == (saved.name, True)
        assert_same(outputs(again), reference)
    with sago_fast.load_model(second, cache_dir=cache) as sibling:  # a re-weighted sibling: its own
        assert sibling.exported.reweighted and opened[-1] == (saved.name, True)
        mine = saved_graph_path(sibling.exported.model_path)
        assert weights(mine) == weights(sibling.exported.model_path)  # its own checkpoint's tensors
        assert_same(outputs(sibling), outputs(with_plain_session(sibling)))
        assert not np.allclose(outputs(sibling)[2], reference[2])  # other weights, other outputs


def test_a_graph_whose_weights_onnx_runtime_changed_is_not_kept(tmp_path, tokenizer):
    checkpoint = build_tiny_checkpoint("llama", tmp_path / "model", SIZE, seed=1, tokenizer=tokenizer)
    with sago_fast.load_model(checkpoint, cache_dir=tmp_path / "cache") as model:
        graph = model.exported.model_path
    saved_graph_path(graph).unlink()
    opening = graph_to_open(graph, None, can_save=True)
    assert opening.path == graph and not opening.optimised and opening.save_to is not None
    open_session(graph, "cpu", save_optimised=opening.save_to)
    data = opening.save_to / SAVED_DATA
    changed = bytearray(data.read_bytes())
    changed[-5] ^= 0xFF  # as if ONNX Runtime had folded something into a weight
    data.write_bytes(bytes(changed))
    keep_saved_graph(opening, graph)
    assert not saved_graph_path(graph).exists() and not opening.save_to.exists()
    # marked: later sessions optimise as before, and do not try to save again
    assert graph_to_open(graph, None, can_save=True) == GraphToOpen(graph)


def test_a_damaged_saved_graph_falls_back_to_the_exported_one(tmp_path, tokenizer, caplog):
    checkpoint = build_tiny_checkpoint("llama", tmp_path / "model", SIZE, seed=1, tokenizer=tokenizer)
    with sago_fast.load_model(checkpoint, cache_dir=tmp_path / "cache") as model:
        reference = outputs(model)
        saved = saved_graph_path(model.exported.model_path)
    saved.write_bytes(b"not a graph")
    with sago_fast.load_model(checkpoint, cache_dir=tmp_path / "cache") as again:
        assert_same(outputs(again), reference)
    assert "opening the exported graph itself" in caplog.text


def test_a_session_that_cannot_save_opens_the_exported_graph(tmp_path, tokenizer, monkeypatch, caplog):
    checkpoint = build_tiny_checkpoint("llama", tmp_path / "model", SIZE, seed=1, tokenizer=tokenizer)
    gone = tmp_path / "no-such-folder"  # where ONNX Runtime cannot write (as a full disk)
    monkeypatch.setattr(
        model_module, "graph_to_open", lambda path, donor, can_save: GraphToOpen(path, save_to=gone)
    )
    with sago_fast.load_model(checkpoint, cache_dir=tmp_path / "cache") as model:
        got = outputs(model)
        plain = outputs(with_plain_session(model))
        assert not saved_graph_path(model.exported.model_path).exists()
    assert_same(got, plain)
    assert "opening the exported graph itself" in caplog.text
