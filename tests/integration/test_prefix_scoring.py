"""Continuations scored on a prompt's prefill cache equal whole-sequence scoring and HF eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

import sago_fast
from sago_fast.checkpoints.tiny import ARCHITECTURES
from sago_fast.runtime.batching import BatchPolicy
from sago_fast.runtime.decode import GenerationSettings, takes_segments
from sago_fast.runtime.prefill import continuations as prefix

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17]]
CONTINUATIONS = [[[20], [21, 22, 23], [24, 25]], [[26, 27, 28, 29], [30]], [[31, 32], [33, 34, 35, 36, 37]]]
TOL = 1e-4
WITHOUT_BLOCKS = {"mistral"}  # sliding-window attention: one row per continuation


def hf_token_logprobs(hf, prompt, cont):
    ids = torch.tensor([prompt + cont])
    with torch.no_grad():
        logp = torch.log_softmax(hf(ids).logits[0].float(), -1)
    return np.array([logp[len(prompt) - 1 + k, t].item() for k, t in enumerate(cont)])


@pytest.mark.parametrize("arch", ARCHITECTURES.names())
def test_cached_continuations_equal_whole_sequences_and_hf(arch, checkpoints, cache_dir):
    # a small budget: several prompt batches and several continuation groups per batch
    model = sago_fast.load_model(checkpoints[arch], cache_dir=cache_dir, batch_policy=BatchPolicy(24, 2))
    hf = AutoModelForCausalLM.from_pretrained(
        checkpoints[arch], dtype=torch.float32, attn_implementation="eager"
    )
    result = model.prefill(PROMPTS, CONTINUATIONS)
    alone = model.probe_ids(PROMPTS)
    np.testing.assert_allclose(result.probe.next_logprobs, alone.next_logprobs, atol=TOL, rtol=0)
    np.testing.assert_allclose(result.probe.hidden_mean, alone.hidden_mean, atol=TOL, rtol=0)
    pairs = [(p, c) for p, conts in zip(PROMPTS, CONTINUATIONS, strict=True) for c in conts]
    whole = model.target_logprobs([p + c for p, c in pairs], [len(c) for _, c in pairs])
    cached = [lp for per_prompt in result.continuation_logprobs for lp in per_prompt]
    for (prompt, cont), on_cache, full in zip(pairs, cached, whole, strict=True):
        assert on_cache.shape == (len(cont),)
        np.testing.assert_allclose(on_cache, full, atol=TOL, rtol=0)
        np.testing.assert_allclose(on_cache, hf_token_logprobs(hf, prompt, cont), atol=TOL, rtol=0)
    # each prompt once; each multi-token continuation but its last token in its prompt's option block, or, without
    # option blocks (sliding-window attention), as [last prompt token] + continuation
    blocks = takes_segments(model.session)
    assert blocks == (arch not in WITHOUT_BLOCKS)
    expected = sum(map(len, PROMPTS)) + sum(
        len(c) + (1 if not blocks else -1) for _, c in pairs if len(c) > 1
    )
    assert result.tokens_processed == expected


def test_option_blocks_split_over_passes_equal_whole_sequences(checkpoints, cache_dir, monkeypatch):
    # a logits budget of one row per pass, and a batch whose middle prompt has no multi-token option
    monkeypatch.setattr(prefix, "LOGITS_BYTES", 1)
    model = sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir)
    continuations = [CONTINUATIONS[0], [[30], [31]], CONTINUATIONS[2]]
    result = model.prefill(PROMPTS, continuations)
    pairs = [(p, c) for p, conts in zip(PROMPTS, continuations, strict=True) for c in conts]
    whole = model.target_logprobs([p + c for p, c in pairs], [len(c) for _, c in pairs])
    cached = [lp for per_prompt in result.continuation_logprobs for lp in per_prompt]
    for on_cache, full in zip(cached, whole, strict=True):
        np.testing.assert_allclose(on_cache, full, atol=TOL, rtol=0)


@pytest.mark.parametrize("arch", ["llama", "mistral"])  # option blocks, and one row per continuation
def test_one_token_continuations_need_no_pass_on_the_cache(arch, checkpoints, cache_dir, monkeypatch):
    """lm-eval's letter answers: every continuation one token (and one empty). They are read off the
    prefill's next-token distribution: no KV cache leaves ONNX Runtime and no pass runs on it, and the
    values equal whole-sequence scoring and HF eager."""
    model = sago_fast.load_model(checkpoints[arch], cache_dir=cache_dir, batch_policy=BatchPolicy(24, 2))
    hf = AutoModelForCausalLM.from_pretrained(
        checkpoints[arch], dtype=torch.float32, attn_implementation="eager"
    )
    continuations = [[[20], [21], [22], [23]], [[30], []], [[31], [32]]]
    asked = []
    run = model.engine.run
    monkeypatch.setattr(
        model.engine, "run", lambda feeds, cache=False: asked.append(cache) or run(feeds, cache=cache)
    )
    result = model.prefill(PROMPTS, continuations)
    assert asked and not any(asked)  # prefill passes only, none of them handing out its cache
    assert result.tokens_processed == sum(map(len, PROMPTS))
    for prompt, conts, scored in zip(PROMPTS, continuations, result.continuation_logprobs, strict=True):
        for cont, on_prefill in zip(conts, scored, strict=True):
            assert on_prefill.shape == (len(cont),)
            if cont:
                np.testing.assert_allclose(on_prefill, hf_token_logprobs(hf, prompt, cont), atol=TOL, rtol=0)
    whole = model.target_logprobs([PROMPTS[0] + c for c in continuations[0]], [1] * 4)
    np.testing.assert_allclose(
        np.concatenate(result.continuation_logprobs[0]), np.concatenate(whole), atol=TOL
    )


def test_generation_continues_from_the_prefill(checkpoints, cache_dir):
    model = sago_fast.load_model(checkpoints["qwen2"], cache_dir=cache_dir)
    settings = GenerationSettings(max_new_tokens=6, stop=())
    result = model.prefill(PROMPTS, CONTINUATIONS, settings)
    alone = model.generate_ids(PROMPTS, settings)
    assert [g.token_ids for g in result.generations] == [g.token_ids for g in alone]
    np.testing.assert_allclose(
        result.probe.hidden_last, model.probe_ids(PROMPTS).hidden_last, atol=TOL, rtol=0
    )
    plain = model.prefill(PROMPTS, CONTINUATIONS)
    for a, b in zip(result.continuation_logprobs, plain.continuation_logprobs, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_allclose(x, y, atol=TOL, rtol=0)


def hf_is_greedy(hf, prompt, cont):
    """lm-eval's ``is_greedy``: the arg-max of the log-softmax at every continuation position (HF eager)."""
    ids = torch.tensor([prompt + cont])
    with torch.no_grad():
        logp = torch.log_softmax(hf(ids).logits[0].float(), -1)
    return bool((logp[len(prompt) - 1 : len(prompt) - 1 + len(cont)].argmax(-1) == torch.tensor(cont)).all())


@pytest.mark.parametrize("arch", ARCHITECTURES.names())
def test_greedy_continuations_are_read_from_the_scoring_passes(arch, checkpoints, cache_dir):
    """Whether a continuation is what greedy decoding produces (lm-eval's is_greedy), for one-token
    continuations, option blocks, one row per continuation and whole sequences: as HF eager's arg-max
    says, and true exactly for the model's own greedy tokens."""
    model = sago_fast.load_model(checkpoints[arch], cache_dir=cache_dir, batch_policy=BatchPolicy(24, 2))
    hf = AutoModelForCausalLM.from_pretrained(
        checkpoints[arch], dtype=torch.float32, attn_implementation="eager"
    )
    settings = GenerationSettings(max_new_tokens=4, stop=(), stop_at_eos=False)
    decoded = [list(g.token_ids) for g in model.generate_ids(PROMPTS, settings)]
    vocab = int(model.exported.manifest["vocab_size"])
    continuations, expected = [], []
    for tokens in decoded:
        other = [(t + 1) % vocab for t in tokens]
        conts = [tokens, tokens[:1], tokens[:2], tokens[:3] + other[3:], other[:1] + tokens[1:], other[:1]]
        continuations.append(conts)
        expected.append([True, True, True, False, False, False])
    result = model.prefill(PROMPTS, continuations)
    assert result.continuation_greedy == expected
    assert {type(g) for per_prompt in result.continuation_greedy for g in per_prompt} == {bool}
    pairs = [(p, c) for p, conts in zip(PROMPTS, continuations, strict=True) for c in conts]
    assert [g for per_prompt in result.continuation_greedy for g in per_prompt] == [
        hf_is_greedy(hf, p, c) for p, c in pairs
    ]
    _, whole = model._score_whole([p + c for p, c in pairs], [len(c) for _, c in pairs])
    assert whole == [g for per_prompt in expected for g in per_prompt]
