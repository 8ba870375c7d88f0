"""Option scoring equals HF eager log-likelihoods (lm-eval convention); a small zoo learns its suite."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

import sago_fast
from sago_fast.checkpoints.tiny import ARCHITECTURES
from sago_fast.datasets.builtin import SUITES
from sago_fast.runtime.scoring import encode_pair, score_continuations
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


def test_small_zoo_learns_and_is_cached(tmp_path):
    config = ZooConfig(
        suites=("comparison",), examples_per_suite=60, save_steps=(5, 250), hidden=48, layers=2
    )
    zoo = build_zoo(tmp_path / "zoo", config)
    assert [p.name for p in zoo.checkpoints] == ["step-00005", "step-00250"] and not zoo.reused
    assert build_zoo(tmp_path / "zoo", config).reused
    examples = SUITES.get("comparison").build(60)
    final = sago_fast.load_model(zoo.checkpoints[-1], cache_dir=tmp_path / "exports")
    trained = template_accuracy(final, examples, template=0)
    assert trained >= 0.7, trained  # chance is 0.5


def _zoo_weights_in_a_process(folder, threads: str, kernels: str, reproducible: bool = True) -> bytes:
    """Train a small zoo in a fresh Python process whose environment asks for ``threads`` and ``kernels``."""
    import os
    import subprocess
    import sys

    code = (
        "import sys; from sago_fast.zoo import ZooConfig, build_zoo; "
        "config = ZooConfig(suites=('comparison',), examples_per_suite=24, save_steps=(40,), hidden=32, "
        f"layers=1, reproducible={reproducible}); build_zoo(sys.argv[1], config)"
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
    caller's environment asks for, the checkpoints are the same bytes (so `make demo` reproduces the
    README's table on other machines), while unpinned training does depend on them."""
    pinned = [
        _zoo_weights_in_a_process(tmp_path / f"pinned-{t}", t, k)
        for t, k in (("2", "avx512"), ("1", "default"))
    ]
    assert pinned[0] == pinned[1]
    free = [
        _zoo_weights_in_a_process(tmp_path / f"free-{t}", t, k, reproducible=False)
        for t, k in (("2", "avx512"), ("1", "default"))
    ]
    assert free[0] != free[1]  # the environment matters without the pin: the test can fail
