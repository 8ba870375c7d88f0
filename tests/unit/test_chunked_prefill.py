"""Chunked passes: a prefill in pieces of a few columns equals one whole pass (tiny Llama, GPT-2)."""

from __future__ import annotations

import numpy as np
import pytest

import sago_fast
from sago_fast.runtime.passes import CPU_PREFILL_CHUNK, chunk_widths
from sago_fast.runtime.prefill.shared_prefix import MIN_SHARED_TOKENS


def test_chunk_widths():
    assert chunk_widths(10, 0) == [10] and chunk_widths(10, 10) == [10] and chunk_widths(1, 4) == [1]
    assert chunk_widths(10, 4) == [4, 3, 3]  # ceil(10 / 4) = 3 pieces, as equal as may be
    assert chunk_widths(9, 3) == [3, 3, 3] and chunk_widths(257, 128) == [86, 86, 85]


def _prefill(model, ids, conts, chunk, sharing):
    """The prefill with ``prefill_chunk`` and ``prefix_sharing`` set, and how many graph calls it made."""
    calls = []
    run = model.engine.run
    model.engine.run = lambda feeds, cache=False: (calls.append(1), run(feeds, cache=cache))[1]
    model.engine.prefill_chunk, model.engine.prefix_sharing = chunk, sharing
    try:
        return model.prefill(ids, conts), len(calls)
    finally:
        model.engine.prefill_chunk, model.engine.prefix_sharing = 0, MIN_SHARED_TOKENS
        del model.engine.run


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_a_prefill_in_chunks_equals_one_whole_pass(arch, checkpoints, cache_dir):
    """Rows of very different lengths in one batch (a short row's first pieces are all padding), options
    of several tokens scored on the cache the pieces built, and prompts along a prefix tree whose pieces
    are chunked too."""
    model = sago_fast.load_model(checkpoints[arch], cache_dir=cache_dir)
    tok = model.tokenizer
    head = "Answer the following question about the capitals of the countries of the world, briefly. " * 2
    texts = [
        "Hi.",
        head + "What is the capital of France? A. Paris B. Rome",
        head + "What is the capital of Italy? A. Paris B. Rome",
        "A prompt of middling length about nothing in particular, to pad the batch.",
    ]
    ids = [tok(t)["input_ids"] for t in texts]
    conts = [
        [
            tok(" Paris", add_special_tokens=False)["input_ids"],
            tok(" Rome city", add_special_tokens=False)["input_ids"],
        ]
    ]
    conts = conts * len(ids)
    for sharing in (0, MIN_SHARED_TOKENS):
        whole, whole_calls = _prefill(model, ids, conts, 0, sharing)
        chunked, chunked_calls = _prefill(model, ids, conts, 5, sharing)
        assert chunked_calls > whole_calls  # the pieces are there
        for name in ("hidden_last", "hidden_mean", "next_logprobs"):
            np.testing.assert_allclose(
                getattr(chunked.probe, name), getattr(whole.probe, name), atol=1e-4, rtol=0, err_msg=name
            )
        for ours, theirs in zip(chunked.continuation_logprobs, whole.continuation_logprobs, strict=True):
            for a, b in zip(ours, theirs, strict=True):
                np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)
        assert chunked.tokens_processed == whole.tokens_processed


def test_chunks_are_on_by_default_on_cpu_only(checkpoints, cache_dir):
    model = sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir)
    assert model.device == "cpu" and model.engine.prefill_chunk == CPU_PREFILL_CHUNK
