"""Generation whose prompt step is a prefill (prefix trees, chunked passes) equals the plain decode loop."""

from __future__ import annotations

import numpy as np
import pytest

import sago_fast
from sago_fast.runtime.decode import GenerationSettings
from sago_fast.runtime.prefill.shared_prefix import MIN_SHARED_TOKENS
from sago_fast.runtime.session import SessionOptions

HEAD = (
    "Question: What is the capital of France?\nAnswer: Paris\n\n"
    "Question: What is the capital of Spain?\nAnswer: Madrid\n\n"
    "Question: What is the capital of Peru?\nAnswer: Lima\n\n"
)
QUESTIONS = ["Italy", "Japan", "Kenya", "Chile", "Egypt"]


def _generate(model, ids, settings, chunk, sharing):
    """model.generate_ids with ``prefill_chunk`` and ``prefix_sharing`` set, and its graph calls."""
    calls = []
    run = model.session.run
    model.session.run = lambda *a, **k: (calls.append(1), run(*a, **k))[1]
    model.engine.prefill_chunk, model.engine.prefix_sharing = chunk, sharing
    try:
        return model.generate_ids(ids, settings), len(calls)
    finally:
        model.engine.prefill_chunk, model.engine.prefix_sharing = 0, MIN_SHARED_TOKENS
        del model.session.run


def _assert_same(ours, plain):
    for a, b in zip(ours, plain, strict=True):
        assert a.token_ids == b.token_ids and a.text == b.text and a.stop_reason == b.stop_reason
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4, rtol=0)


@pytest.mark.parametrize("io_binding", ["off", "on"])
def test_generation_from_shared_prefixes_and_chunks_equals_the_plain_loop(io_binding, checkpoints, cache_dir):
    """Few-shot prompts sharing their examples (a tree), an unrelated short prompt, rows stopping at
    different steps (a stop string, the length limit): the same tokens and texts as the decode loop whose
    first step is one plain pass, log-probs within 1e-4, with trees, with chunks, with both."""
    model = sago_fast.load_model(
        checkpoints["llama"], cache_dir=cache_dir, session_options=SessionOptions(io_binding=io_binding)
    )
    tok = model.tokenizer
    texts = [HEAD + f"Question: What is the capital of {q}?\nAnswer:" for q in QUESTIONS] + ["Hello there"]
    ids = [tok(t)["input_ids"] for t in texts]
    assert min(len(i) for i in ids[:-1]) > 2 * MIN_SHARED_TOKENS
    reasons = set()
    for settings in (
        GenerationSettings(max_new_tokens=6, stop=(), stop_at_eos=False),
        GenerationSettings(max_new_tokens=9, stop=("e",), stop_at_eos=True),
    ):
        plain, _ = _generate(model, ids, settings, 0, 0)
        reasons |= {g.stop_reason for g in plain}
        print(settings, [(g.stop_reason, len(g.token_ids)) for g in plain])
        for chunk, sharing in ((0, MIN_SHARED_TOKENS), (7, 0), (7, MIN_SHARED_TOKENS)):
            ours, _ = _generate(model, ids, settings, chunk, sharing)
            _assert_same(ours, plain)
    assert {"length", "stop"} <= reasons


def test_a_shared_prefix_is_prefilled_once_for_generation(checkpoints, cache_dir):
    """Through ``prefill(..., generation=...)``: the few-shot examples go through the model once, not
    once per prompt, and the probe (hidden states, next-token distribution) is that of the plain prefill."""
    model = sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir)
    tok = model.tokenizer
    ids = [tok(HEAD + f"Question: What is the capital of {q}?\nAnswer:")["input_ids"] for q in QUESTIONS]
    settings = GenerationSettings(max_new_tokens=4, stop=(), stop_at_eos=False)
    model.engine.prefill_chunk, model.engine.prefix_sharing = 0, 0
    plain = model.prefill(ids, generation=settings)
    model.engine.prefix_sharing = MIN_SHARED_TOKENS
    shared = model.prefill(ids, generation=settings)
    generated = sum(len(g.token_ids) - 1 for g in plain.generations)
    assert plain.tokens_processed == sum(map(len, ids)) + generated
    common = min(len(i) for i in ids) - 12  # the examples and the question's first words
    assert shared.tokens_processed <= plain.tokens_processed - (len(ids) - 1) * common
    _assert_same(shared.generations, plain.generations)
    for name in ("hidden_last", "hidden_mean", "next_logprobs"):
        np.testing.assert_allclose(
            getattr(shared.probe, name), getattr(plain.probe, name), atol=1e-4, rtol=0, err_msg=name
        )


def test_decoding_parts_fit_the_batch_policy(checkpoints, cache_dir):
    """A prefilled batch whose cache plus max_new_tokens per row exceed the token budget decodes in
    parts, with the same generations."""
    from sago_fast.runtime.batching import BatchPolicy

    model = sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir)
    tok = model.tokenizer
    ids = [tok(HEAD + f"Question: What is the capital of {q}?\nAnswer:")["input_ids"] for q in QUESTIONS]
    settings = GenerationSettings(max_new_tokens=5, stop=(), stop_at_eos=False)
    plain, _ = _generate(model, ids, settings, 0, 0)
    model.engine.batch_policy = BatchPolicy(token_budget=2 * (max(map(len, ids)) + 5 + 8), max_batch=64)
    small, calls = _generate(model, ids, settings, 0, MIN_SHARED_TOKENS)
    _assert_same(small, plain)
    assert calls > 5  # the decode steps of more than one part
