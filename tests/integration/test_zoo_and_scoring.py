"""Option scoring equals HF eager log-likelihoods (lm-eval convention); a small zoo learns its suite."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

import sago_fast
from sago_fast.answers.scoring import encode_pair, score_continuations
from sago_fast.checkpoints.tiny import ARCHITECTURES
from sago_fast.datasets.builtin import SUITES
from sago_fast.zoo import ZooConfig, build_zoo
from sago_fast.zoo.evaluate import template_accuracy


def hf_loglik(checkpoint, tokenizer, context, continuation):
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    ctx, cont = encode_pair(tokenizer, context, continuation)
    ids = torch.tensor([ctx + cont])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].float(), -1)
    return sum(float(logp[len(ctx) - 1 + j, t]) for j, t in enumerate(cont))


@pytest.mark.parametrize("arch", ARCHITECTURES.names())
def test_continuation_scores_match_hf_eager(arch, checkpoints, cache_dir):
    """The scoring graph (one pass per pair, mixed continuation lengths in one batch) equals HF eager."""
    model = sago_fast.load_model(checkpoints[arch], cache_dir=cache_dir)
    contexts = ["Question: What is 2 + 3?\nAnswer:", "The capital of France is ", "Q: colour? A:"]
    continuations = [" 5", "Paris", " green and blue"]
    got = score_continuations(model, contexts, continuations)
    want = [
        hf_loglik(checkpoints[arch], model.tokenizer, c, k)
        for c, k in zip(contexts, continuations, strict=True)
    ]
    np.testing.assert_allclose(got.loglik, want, atol=1e-4)
    assert got.n_chars.tolist() == [2, 5, 15]


def test_trailing_space_moves_to_continuation(checkpoints, cache_dir):
    model = sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir)
    a = score_continuations(model, ["Answer: "], ["Paris"]).loglik
    b = score_continuations(model, ["Answer:"], [" Paris"]).loglik
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_small_zoo_learns_and_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("SAGO_CACHE_DIR", str(tmp_path / "cache"))
    config = ZooConfig(
        suites=("comparison",), examples_per_suite=60, save_steps=(5, 250), hidden=48, layers=2
    )
    zoo = build_zoo(tmp_path / "zoo", config)
    assert [p.name for p in zoo.checkpoints] == ["step-00005", "step-00250"] and not zoo.reused
    assert zoo.source == "trained"
    again = build_zoo(tmp_path / "zoo", config)
    assert again.reused and again.checkpoints == zoo.checkpoints
    # another output folder shares the zoo trained into the cache (keyed by the configuration)
    elsewhere = build_zoo(tmp_path / "other", config)
    assert elsewhere.reused and elsewhere.source == "cache"
    for a, b in zip(zoo.checkpoints, elsewhere.checkpoints, strict=True):
        assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    examples = SUITES.get("comparison").build(60)
    final = sago_fast.load_model(zoo.checkpoints[-1], cache_dir=tmp_path / "exports")
    trained = template_accuracy(final, examples, template=0)
    assert trained >= 0.7, trained  # chance is 0.5


def test_the_default_zoo_is_shipped_and_copied_without_training(tmp_path, monkeypatch):
    """`sago demo` and `sago zoo` never train the default zoo: the package ships it (same bytes on every
    machine), and any output folder gets a copy."""
    import json
    import shutil

    from sago_fast.zoo.sources import SHIPPED

    monkeypatch.setenv("SAGO_CACHE_DIR", str(tmp_path / "cache"))

    def no_training(*args, **kwargs):
        raise AssertionError("the default zoo must not be trained")

    monkeypatch.setattr("sago_fast.zoo.sources.train_zoo", no_training)
    zoo = build_zoo(tmp_path / "a" / "zoo", ZooConfig())
    assert zoo.source == "shipped" and [p.name for p in zoo.checkpoints] == [
        "step-00150",
        "step-00500",
        "step-01200",
    ]
    manifest = json.loads((SHIPPED / "zoo.json").read_text())
    assert manifest["key"] == ZooConfig().key()  # the shipped zoo is the default configuration's
    for ours, shipped in zip(zoo.checkpoints, sorted(SHIPPED.glob("step-*")), strict=True):
        assert (ours / "model.safetensors").read_bytes() == (shipped / "model.safetensors").read_bytes()
    assert build_zoo(tmp_path / "a" / "zoo", ZooConfig()).reused
    assert not (tmp_path / "cache" / "zoo").exists()  # nothing trained, nothing cached
    # a folder holding a zoo trained by an earlier version (same configuration key) gets the shipped one
    old = tmp_path / "old" / "zoo"
    shutil.copytree(tmp_path / "a" / "zoo", old)
    manifest = json.loads((old / "zoo.json").read_text())
    manifest.pop("source")
    (old / "zoo.json").write_text(json.dumps(manifest))
    (old / "step-01200" / "model.safetensors").write_bytes(b"trained elsewhere")
    again = build_zoo(old, ZooConfig())
    assert again.source == "shipped"
    shipped_weights = (SHIPPED / "step-01200" / "model.safetensors").read_bytes()
    assert (old / "step-01200" / "model.safetensors").read_bytes() == shipped_weights


def test_reproducible_training_asks_only_for_kernels_the_cpu_has():
    from sago_fast.zoo.train import reproducible_env

    assert reproducible_env(frozenset({"sse2", "avx2", "avx512f"}))["ATEN_CPU_CAPABILITY"] == "avx2"
    plain = reproducible_env(frozenset({"sse2", "sse4_2"}))
    assert plain["ATEN_CPU_CAPABILITY"] == "default" and plain["MKL_CBWR"] == "COMPATIBLE"
    assert reproducible_env(frozenset())["OMP_NUM_THREADS"] == "1"


def _kernel_sets() -> list[str]:
    """The ATen kernel sets this CPU can run, from what it reports (asking for one it lacks is SIGILL)."""
    from sago_fast.zoo.train import cpu_flags

    flags = cpu_flags()
    sets = ["default"]
    if "avx2" in flags:
        sets.append("avx2")
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        sets.append("avx512")
    return sets


def _zoo_weights_in_a_process(folder, threads: str, kernels: str) -> bytes:
    """Train a small zoo in a fresh Python process whose environment asks for ``threads`` and ``kernels``."""
    import os
    import subprocess
    import sys

    code = (
        "import sys; from sago_fast.zoo import ZooConfig, train_zoo; "
        "config = ZooConfig(suites=('comparison',), examples_per_suite=24, save_steps=(40,), hidden=32, "
        "layers=1); train_zoo(sys.argv[1], config)"
    )
    env = {
        **os.environ,
        "OMP_NUM_THREADS": threads,
        "ATEN_CPU_CAPABILITY": kernels,
        "MKL_NUM_THREADS": threads,
    }
    subprocess.run([sys.executable, "-c", code, str(folder)], env=env, check=True, timeout=600)
    return (folder / "step-00040" / "model.safetensors").read_bytes()


def test_zoo_training_does_not_depend_on_the_callers_threads_or_kernels(tmp_path):
    """The reproducible zoo trains in a pinned child process: whatever thread count and CPU kernel set the
    caller's environment asks for (among those the CPU has), the checkpoints are the same bytes. (Whether
    unpinned training differs depends on the machine: on some, these two settings happen to agree.)"""
    sets = _kernel_sets()
    if len(sets) < 2:
        pytest.skip(f"this CPU offers one ATen kernel set only ({sets[0]}): nothing to vary")
    pinned = [
        _zoo_weights_in_a_process(tmp_path / f"pinned-{t}-{k}", t, k)
        for t, k in (("2", sets[-1]), ("1", sets[0]))
    ]
    assert pinned[0] == pinned[1]
