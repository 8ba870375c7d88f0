"""Export cache: reuse, content keys, concurrency, and nothing half-written on failure."""

from __future__ import annotations

import json
import multiprocessing
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import sago_fast
from sago_fast.checkpoints.resolve import resolve_checkpoint
from sago_fast.errors import CheckpointError, ExportError, InputError
from sago_fast.exporters.cache import ExportCache, export_key
from sago_fast.types import ExportSettings


def _entries(root: Path) -> list[Path]:
    """Export entries (the ``graphs/`` index of shared graphs is not one)."""
    return [p for p in root.iterdir() if p.is_dir() and p.name != "graphs"] if root.exists() else []


def test_second_export_reuses_cache(checkpoints, tmp_path):
    cache = ExportCache(tmp_path / "cache")
    ckpt = resolve_checkpoint(checkpoints["llama"])
    first = cache.get_or_export(ckpt)
    second = cache.get_or_export(ckpt)
    assert not first.reused and second.reused
    assert first.path == second.path
    assert len(_entries(cache.root)) == 1


def test_changing_one_weight_changes_the_key(checkpoints, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(checkpoints["llama"], copy)
    before = resolve_checkpoint(copy)
    tensors = load_file(str(copy / "model.safetensors"))
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].copy()
    tensors[name].flat[0] += np.float32(1e-3)
    save_file(tensors, str(copy / "model.safetensors"), metadata={"format": "pt"})
    after = resolve_checkpoint(copy)
    assert before.content_hash != after.content_hash
    assert export_key(before, ExportSettings()) != export_key(after, ExportSettings())
    # the key ignores the path: the same content elsewhere has the same key
    assert export_key(resolve_checkpoint(checkpoints["llama"]), ExportSettings()) == export_key(
        before, ExportSettings()
    )
    # and depends on the export settings
    assert export_key(before, ExportSettings(dtype="fp16")) != export_key(before, ExportSettings())


def _export_in_process(args):
    checkpoint, root = args
    exported = ExportCache(root).get_or_export(resolve_checkpoint(checkpoint))
    return str(exported.path), exported.reused


def test_two_concurrent_exports_do_the_work_once(checkpoints, tmp_path):
    root = tmp_path / "cache"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.map(_export_in_process, [(str(checkpoints["gpt2"]), str(root))] * 2)
    assert results[0][0] == results[1][0]
    assert sorted(r[1] for r in results) == [False, True]
    assert len(_entries(root)) == 1
    assert not [p for p in root.iterdir() if p.name.startswith(".tmp-")]


def test_failed_export_leaves_nothing(tmp_path, unexportable_checkpoint):
    """An architecture Optimum can't export: clear ExportError and no cache entry."""
    path = unexportable_checkpoint
    cache_root = tmp_path / "cache"
    with pytest.raises(ExportError, match="cannot be exported"):
        sago_fast.load_model(path, cache_dir=cache_root)
    assert _entries(cache_root) == []


def test_fp16_export_runs_close_to_fp32(checkpoints, cache_dir):
    fp32 = sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir)
    fp16 = sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir, dtype="fp16")
    assert fp16.exported.manifest["dtype"] == "fp16"
    texts = ["What is 12 + 7?", "a b c"]
    a, b = fp32.probe(texts), fp16.probe(texts)
    assert b.hidden_last.dtype == np.float32
    np.testing.assert_allclose(a.hidden_last, b.hidden_last, atol=2e-2)
    np.testing.assert_allclose(a.next_logprobs, b.next_logprobs, atol=2e-2)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p / "missing", "no such checkpoint"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "no config.json"),
    ],
)
def test_bad_checkpoint_paths(tmp_path, make, message):
    with pytest.raises(CheckpointError, match=message):
        resolve_checkpoint(make(tmp_path))


def test_pickle_only_checkpoint_is_refused(checkpoints, tmp_path):
    import torch
    from safetensors.torch import load_file as load_torch

    path = tmp_path / "pickled"
    shutil.copytree(checkpoints["llama"], path)
    torch.save(load_torch(str(path / "model.safetensors")), path / "pytorch_model.bin")
    (path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="safetensors only"):
        resolve_checkpoint(path)
    assert resolve_checkpoint(path, allow_pickle=True).weight_files == ("pytorch_model.bin",)


def test_bad_texts(checkpoints, cache_dir):
    model = sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir)
    with pytest.raises(InputError, match="text 1: empty prompt"):
        model.probe(["fine", ""])
    too_long = "word " * 1200  # max positions 512
    with pytest.raises(InputError, match="longer than the model's 512 positions"):
        model.probe([too_long])
    with pytest.raises(InputError, match="list of texts"):
        model.probe("not a list")


def test_manifest_describes_graph(checkpoints, cache_dir):
    model = sago_fast.load_model(checkpoints["gemma"], cache_dir=cache_dir)
    manifest = json.loads((model.exported.path / "manifest.json").read_text())
    assert manifest["content_hash"] == model.model_id
    assert manifest["outputs"] == [
        "hidden_last", "hidden_mean", "next_logprobs", "target_logprobs", "target_best"
    ]  # fmt: skip
    assert manifest["files"] == {"model": "model.onnx"} and manifest["kv_cache"] is True
    assert (model.exported.path / "tokenizer.json").is_file()


def test_a_damaged_entry_is_exported_again(checkpoints, tmp_path, caplog):
    cache_dir = tmp_path / "cache"
    with sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir) as model:
        expected = model.probe(["What is 2 + 3?"]).next_logprobs
        entry = model.exported.path
    data = entry / "model.onnx_data"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])  # truncated, as by a full disk
    with sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir) as model:
        assert not model.exported.reused and model.exported.path == entry
        np.testing.assert_allclose(model.probe(["What is 2 + 3?"]).next_logprobs, expected, atol=1e-5, rtol=0)
    assert sum("damaged" in r.getMessage() for r in caplog.records) == 1  # said once, not at every look
