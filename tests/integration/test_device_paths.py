"""Device-path logic that runs on CPU too: IOBinding decode loop, out-of-memory back-off with a fake
allocator, the free-memory token budget."""

from __future__ import annotations

import numpy as np
import pytest
from assertions import assert_same_generations

import sago_fast
from sago_fast.errors import DeviceError
from sago_fast.runtime.batching import BatchPolicy, is_out_of_memory, token_budget_for_memory
from sago_fast.runtime.decode import GenerationSettings
from sago_fast.runtime.session import SessionOptions

PROMPTS = [
    "What is 12 + 7?",
    "a",
    "Reverse the word 'stone'.",
    "Options: A. red B. green. The sky is",
    "x y z",
]


class FakeOOMSession:
    """Wraps a real session; any call with more than ``limit`` rows fails like ORT's CUDA allocator."""

    def __init__(self, real, limit: int) -> None:
        self.real, self.limit, self.failures = real, limit, []

    def run(self, names, feeds):
        rows = len(feeds["input_ids"])
        if rows > self.limit:
            self.failures.append(rows)
            raise RuntimeError(
                "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running "
                "MatMul node. Failed to allocate memory for requested buffer of size 123456"
            )
        return self.real.run(names, feeds)

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_iobinding_decode_loop_equals_the_numpy_loop(checkpoints, cache_dir):
    plain = sago_fast.load_model(checkpoints["qwen2"], cache_dir=cache_dir)
    bound = sago_fast.load_model(
        checkpoints["qwen2"], cache_dir=cache_dir, session_options=SessionOptions(io_binding="on")
    )
    assert plain.engine.io_binding_device is None and bound.engine.io_binding_device == "cpu"
    for settings in (
        GenerationSettings(max_new_tokens=9, stop=()),
        GenerationSettings(max_new_tokens=9, stop=("e",)),
    ):
        expected = plain.generate(PROMPTS, settings)
        got = bound.generate(PROMPTS, settings)
        assert_same_generations(got, expected)
    # the prompt step hands its host outputs over (probe, continuation scoring) before decoding goes on
    ids = bound.tokenize(PROMPTS)
    conts = [[[7, 8, 9], [10]] for _ in PROMPTS]
    settings = GenerationSettings(max_new_tokens=5, stop=())
    got, expected = bound.prefill(ids, conts, settings), plain.prefill(ids, conts, settings)
    assert_same_generations(got.generations, expected.generations)
    np.testing.assert_allclose(got.probe.hidden_mean, expected.probe.hidden_mean, atol=1e-5, rtol=0)
    for a, b in zip(got.continuation_logprobs, expected.continuation_logprobs, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_allclose(x, y, atol=1e-5, rtol=0)


def test_out_of_memory_backs_off_and_gives_the_same_numbers(checkpoints, cache_dir):
    model = sago_fast.load_model(
        checkpoints["llama"], cache_dir=cache_dir, batch_policy=BatchPolicy(max_batch=8, call_overhead=300)
    )
    reference = model.probe(PROMPTS)
    ref_scores = model.target_logprobs([[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16]], [2, 1, 3])
    ref_generations = model.generate(PROMPTS, GenerationSettings(max_new_tokens=4, stop=()))

    model.engine.session = FakeOOMSession(model.session, limit=2)
    got = model.probe(PROMPTS)
    assert model.session.failures and max(model.session.failures) == 5
    np.testing.assert_allclose(got.hidden_last, reference.hidden_last, atol=1e-5)  # other padding
    np.testing.assert_allclose(got.next_logprobs, reference.next_logprobs, atol=1e-5)
    assert model.batch_policy.max_batch < 8  # later batches stay below the size that failed
    assert model.batch_policy.call_overhead == 300  # the rest of the policy is kept

    model.engine.batch_policy = BatchPolicy(max_batch=8)
    model.engine.session = FakeOOMSession(model.session.real, limit=1)
    for a, b in zip(
        model.target_logprobs([[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16]], [2, 1, 3]),
        ref_scores,
        strict=True,
    ):
        np.testing.assert_allclose(a, b, atol=1e-5)

    model.engine.batch_policy = BatchPolicy(max_batch=8)
    model.engine.session = FakeOOMSession(model.session.real, limit=2)
    assert_same_generations(
        model.generate(PROMPTS, GenerationSettings(max_new_tokens=4, stop=())), ref_generations
    )

    model.engine.session = FakeOOMSession(model.session.real, limit=0)  # not even one prompt fits
    with pytest.raises(DeviceError, match="out of device memory on a single prompt"):
        model.probe(["a"])


def test_other_errors_are_not_taken_for_out_of_memory(checkpoints, cache_dir):
    assert is_out_of_memory(RuntimeError("CUDA failure 2: out of memory ; GPU=0"))
    assert not is_out_of_memory(RuntimeError("Invalid rank for input: input_ids"))
    model = sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir)

    class Broken(FakeOOMSession):
        def run(self, names, feeds):
            raise RuntimeError("Invalid rank for input: input_ids")

    model.engine.session = Broken(model.session, limit=10)
    with pytest.raises(RuntimeError, match="Invalid rank"):
        model.probe(PROMPTS)


def test_cuda_plans_with_its_own_call_cost(monkeypatch):
    """CUDA's policy (token budget from free memory, or the default where that is unknown) plans with
    CUDA_CALL_OVERHEAD, not the CPU's call cost."""
    import sago_fast.runtime.batching as batching
    from sago_fast.runtime.model import _policy_for_free_memory

    manifest = {"n_layers": 16, "d_model": 2048, "dtype": "fp16"}
    for free in (None, 8 * 2**30):
        monkeypatch.setattr(batching, "free_cuda_memory", lambda free=free: free)
        policy = _policy_for_free_memory(manifest)
        assert policy.call_overhead == batching.CUDA_CALL_OVERHEAD != batching.CPU_CALL_OVERHEAD
    assert policy.token_budget == token_budget_for_memory(8 * 2**30, 16, 2048, 2)
    assert BatchPolicy().call_overhead == batching.CPU_CALL_OVERHEAD


def test_token_budget_for_memory_by_hand():
    # 8 GiB free, half of it, fp16, d_model 2048, 16 layers: 2 * 2048 * (16 + 34) = 204800 bytes a token
    assert token_budget_for_memory(8 * 2**30, 16, 2048, 2) == (8 * 2**30 // 2) // 204800
    assert token_budget_for_memory(10, 16, 2048, 2) == 256  # never below the floor
    assert token_budget_for_memory(2**50, 2, 64, 4) == 262144  # nor above the ceiling


SHARED = [
    "Question: which of these is a colour? Answer with the option. red",
    "Question: which of these is a colour? Answer with the option. blue",
    "Question: which of these is a colour? Answer with the option, please. green",
    "Something else entirely",
]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_option_blocks_and_shared_prefixes_keep_the_cache_in_ort_memory(arch, checkpoints, cache_dir):
    """IOBinding (CUDA's path, here on the CPU): the prefill's KV cache stays an ONNX Runtime value and is
    fed back to the option-block pass, and shared prefixes' caches are continued with rows gathered in
    ONNX Runtime; no present.* crosses to numpy, and every number equals the plain path's."""
    from sago_fast.runtime import kv_cache

    plain = sago_fast.load_model(checkpoints[arch], cache_dir=cache_dir)
    bound = sago_fast.load_model(
        checkpoints[arch], cache_dir=cache_dir, session_options=SessionOptions(io_binding="on")
    )
    for model in (plain, bound):
        model.engine.prefix_sharing = 4  # the SHARED prompts share far more than 4 leading tokens
    ids = bound.tokenize(SHARED)
    conts = [[[7, 8, 9], [10], [11, 12]] for _ in SHARED]
    made: list[type] = []
    original = bound.engine.kv_cache
    bound.engine.kv_cache = lambda out: made.append(type(original(out))) or original(out)
    gathered: list[int] = []
    gather = kv_cache.RowGather.__call__
    kv_cache.RowGather.__call__ = lambda self, value, idx: (
        gathered.append(len(idx)) or gather(self, value, idx)
    )
    try:
        got = bound.prefill(ids, conts)
    finally:
        kv_cache.RowGather.__call__ = gather
    expected = plain.prefill(ids, conts)
    assert made and set(made) == {kv_cache.DeviceCache} and gathered  # shared prefixes: rows gathered
    np.testing.assert_allclose(got.probe.hidden_mean, expected.probe.hidden_mean, atol=1e-5, rtol=0)
    np.testing.assert_allclose(got.probe.next_logprobs, expected.probe.next_logprobs, atol=1e-5, rtol=0)
    for a, b in zip(got.continuation_logprobs, expected.continuation_logprobs, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_allclose(x, y, atol=1e-5, rtol=0)
