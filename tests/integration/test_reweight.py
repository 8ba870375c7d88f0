"""Sibling checkpoints (same architecture and config) share one exported graph, re-weighted at load."""

from __future__ import annotations

import numpy as np
import pytest

import sago_fast
from sago_fast.checkpoints.tiny import TinySize, build_tiny_checkpoint
from sago_fast.errors import InputError
from sago_fast.exporters.cache import copy_export
from sago_fast.runtime.decode import GenerationSettings

SIZE = TinySize(max_positions=128)
PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
CONTINUATIONS = [[[20, 21], [22]], [[23, 24, 25]], [[26], [27, 28]]]
TOL = 1e-5


def outputs(model):
    result = model.prefill(PROMPTS, CONTINUATIONS)
    return result.probe, [lp for conts in result.continuation_logprobs for lp in conts]


def assert_same(a, b):
    (probe_a, conts_a), (probe_b, conts_b) = a, b
    np.testing.assert_allclose(probe_a.hidden_last, probe_b.hidden_last, atol=TOL, rtol=0)
    np.testing.assert_allclose(probe_a.hidden_mean, probe_b.hidden_mean, atol=TOL, rtol=0)
    np.testing.assert_allclose(probe_a.next_logprobs, probe_b.next_logprobs, atol=TOL, rtol=0)
    for x, y in zip(conts_a, conts_b, strict=True):
        np.testing.assert_allclose(x, y, atol=TOL, rtol=0)


@pytest.mark.parametrize("arch", ["llama", "gemma", "gpt2", "falcon"])  # untied, tied, tied Conv1D, GQA
def test_reweighted_graph_equals_a_fresh_export(arch, tmp_path, tokenizer):
    first = build_tiny_checkpoint(arch, tmp_path / "step-1", SIZE, seed=1, tokenizer=tokenizer)
    second = build_tiny_checkpoint(arch, tmp_path / "step-2", SIZE, seed=2, tokenizer=tokenizer)
    shared = tmp_path / "shared-cache"
    with sago_fast.load_model(first, cache_dir=shared) as model:
        assert not model.exported.reweighted and model.exported.manifest["reweight"]
    with sago_fast.load_model(second, cache_dir=shared) as reweighted:
        assert reweighted.exported.reweighted
        entry = reweighted.exported.path
        assert not (entry / "model.onnx_data").exists()  # no weights written: the checkpoint's own file
        linked = entry / "weights.model.safetensors"
        assert linked.stat().st_ino == (second / "model.safetensors").stat().st_ino
        import onnx

        graph = onnx.load(str(entry / "model.onnx"), load_external_data=False).graph
        locations = {
            i.name: {e.key: e.value for e in i.external_data}.get("location") for i in graph.initializer
        }
        for name in reweighted.exported.manifest["reweight"]["names"]:
            assert locations[name] == linked.name  # every parameter read from the checkpoint's file
        got = outputs(reweighted)
        generated = reweighted.generate_ids(PROMPTS, GenerationSettings(max_new_tokens=4, stop=()))
        standalone = copy_export(reweighted.exported, tmp_path / "standalone")
    with sago_fast.load_model(second, cache_dir=tmp_path / "fresh-cache") as fresh:
        assert not fresh.exported.reweighted
        assert_same(got, outputs(fresh))
        expected = fresh.generate_ids(PROMPTS, GenerationSettings(max_new_tokens=4, stop=()))
        assert [g.token_ids for g in generated] == [g.token_ids for g in expected]
    # `sago export` of a re-weighted entry writes a standalone graph with the sibling's weights, which
    # onnx itself loads (no file of it is a hard link: onnx >= 1.23 refuses those) and checks
    onnx.checker.check_model(str(standalone / "model.onnx"))
    loaded = onnx.load(str(standalone / "model.onnx"))  # external data included
    assert all(f.stat().st_nlink == 1 for f in standalone.iterdir())
    assert not any(".ort-" in f.name for f in standalone.iterdir())  # ONNX Runtime's own copies stay
    assert {i.name for i in loaded.graph.initializer} >= set(
        reweighted.exported.manifest["reweight"]["names"]
    )
    import onnxruntime as ort

    session = ort.InferenceSession(str(standalone / "model.onnx"), providers=["CPUExecutionProvider"])
    with sago_fast.load_model(second, cache_dir=tmp_path / "fresh-cache") as fresh:
        fresh.engine.session = session
        assert_same(got, outputs(fresh))


def test_a_checkpoint_file_changed_in_place_is_re_weighted_again(tmp_path, tokenizer):
    """The sibling entry hard-links the checkpoint's file: rewritten in place (same inode), the entry is
    stale and is made again, so the cached numbers never silently follow the new bytes."""
    from sago_fast.exporters.cache import _read_entry

    first = build_tiny_checkpoint("llama", tmp_path / "step-1", SIZE, seed=1, tokenizer=tokenizer)
    second = build_tiny_checkpoint("llama", tmp_path / "step-2", SIZE, seed=2, tokenizer=tokenizer)
    third = build_tiny_checkpoint("llama", tmp_path / "step-3", SIZE, seed=3, tokenizer=tokenizer)
    cache = tmp_path / "cache"
    sago_fast.load_model(first, cache_dir=cache).close()
    with sago_fast.load_model(second, cache_dir=cache) as model:
        entry, before = model.exported.path, outputs(model)
    file = second / "model.safetensors"
    original, inode = file.read_bytes(), file.stat().st_ino

    def write_in_place(data: bytes) -> None:  # the same inode, other bytes (as `open(path, "wb")` does)
        with file.open("r+b") as handle:
            handle.truncate(0)
            handle.write(data)
        assert file.stat().st_ino == inode

    write_in_place((third / "model.safetensors").read_bytes())
    assert _read_entry(entry) is None
    write_in_place(original)  # the content the entry's key stands for, written again
    with sago_fast.load_model(second, cache_dir=cache) as model:
        assert model.exported.path == entry and model.exported.reused is False
        assert_same(outputs(model), before)


def test_without_hard_links_the_checkpoint_file_is_copied(tmp_path, tokenizer, monkeypatch):
    """Another file system (os.link fails): the sibling's safetensors file is copied into its entry."""
    import os

    first = build_tiny_checkpoint("qwen2", tmp_path / "step-1", SIZE, seed=1, tokenizer=tokenizer)
    second = build_tiny_checkpoint("qwen2", tmp_path / "step-2", SIZE, seed=2, tokenizer=tokenizer)
    sago_fast.load_model(first, cache_dir=tmp_path / "shared").close()

    def cross_device(source, target):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", cross_device)
    with sago_fast.load_model(second, cache_dir=tmp_path / "shared") as reweighted:
        copied = reweighted.exported.path / "weights.model.safetensors"
        assert reweighted.exported.reweighted and copied.stat().st_nlink == 1
        assert copied.read_bytes() == (second / "model.safetensors").read_bytes()
        assert "weights.model.safetensors" not in reweighted.exported.manifest["linked"]
        got = outputs(reweighted)
    monkeypatch.undo()
    with sago_fast.load_model(second, cache_dir=tmp_path / "fresh") as fresh:
        assert_same(got, outputs(fresh))


def test_bf16_sibling_is_converted_to_the_export_dtype(tmp_path, tokenizer):
    import torch
    from safetensors.torch import load_file, save_file

    first = build_tiny_checkpoint("qwen2", tmp_path / "step-1", SIZE, seed=1, tokenizer=tokenizer)
    second = build_tiny_checkpoint("qwen2", tmp_path / "step-2", SIZE, seed=2, tokenizer=tokenizer)
    file = second / "model.safetensors"
    save_file(
        {k: v.to(torch.bfloat16) for k, v in load_file(file).items()}, str(file), metadata={"format": "pt"}
    )
    sago_fast.load_model(first, cache_dir=tmp_path / "shared").close()
    with sago_fast.load_model(second, cache_dir=tmp_path / "shared") as reweighted:
        assert reweighted.exported.reweighted
        assert (reweighted.exported.path / "model.onnx_data").is_file()  # bf16 -> fp32, written once
        got = outputs(reweighted)
    with sago_fast.load_model(second, cache_dir=tmp_path / "fresh") as fresh:
        assert not fresh.exported.reweighted
        assert_same(got, outputs(fresh))


def test_a_truncated_sibling_is_one_clear_error(tmp_path, tokenizer):
    from sago_fast.errors import CheckpointError

    first = build_tiny_checkpoint("qwen2", tmp_path / "step-1", SIZE, seed=1, tokenizer=tokenizer)
    second = build_tiny_checkpoint("qwen2", tmp_path / "step-2", SIZE, seed=2, tokenizer=tokenizer)
    sago_fast.load_model(first, cache_dir=tmp_path / "shared").close()
    file = second / "model.safetensors"
    file.write_bytes(file.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"step-2/model\.safetensors: not a readable safetensors file"):
        sago_fast.load_model(second, cache_dir=tmp_path / "shared")
    assert not [p for p in (tmp_path / "shared").iterdir() if p.name.startswith(".tmp-")]  # nothing left


def test_other_config_is_exported_again(tmp_path, tokenizer):
    cache = tmp_path / "cache"
    small = build_tiny_checkpoint("qwen2", tmp_path / "a", SIZE, tokenizer=tokenizer)
    deeper = build_tiny_checkpoint(
        "qwen2", tmp_path / "b", TinySize(layers=3, max_positions=128), tokenizer=tokenizer
    )
    sago_fast.load_model(small, cache_dir=cache).close()
    with sago_fast.load_model(deeper, cache_dir=cache) as model:
        assert not model.exported.reweighted and model.n_layers == 3


def test_without_a_kv_cache_graph_scoring_works_and_generation_is_refused(tmp_path, tokenizer, monkeypatch):
    import sago_fast.exporters.unified as export_module  # export.py imports it when it exports

    real = export_module.unified_config

    def no_past(model, float_dtype="fp32", with_past=True):
        if with_past:
            raise RuntimeError("Sizes of tensors must match (simulated with-past failure)")
        return real(model, float_dtype, with_past=False)

    checkpoint = build_tiny_checkpoint("llama", tmp_path / "ck", SIZE, tokenizer=tokenizer)
    with sago_fast.load_model(checkpoint, cache_dir=tmp_path / "with-cache") as full:
        expected = outputs(full)
    monkeypatch.setattr(export_module, "unified_config", no_past)
    with sago_fast.load_model(checkpoint, cache_dir=tmp_path / "no-cache") as model:
        assert model.exported.manifest["kv_cache"] is False and not model.has_kv_cache
        assert_same(outputs(model), expected)
        with pytest.raises(InputError, match="cannot generate"):
            model.generate_ids(PROMPTS, GenerationSettings(max_new_tokens=2))
