"""Shared prefixes: the grouping by hand, and a prefill through them equal to one without (tiny Llama)."""

from __future__ import annotations

import numpy as np
import pytest

import sago_fast
from sago_fast.runtime.shared_prefix import PrefixGroup, combined_mean, prefix_groups


def test_groups_by_hand():
    a = list(range(40))
    prompts = [[*a, 1, 2], [*a, 1, 3], [*a, 9], list(range(100, 150)), a[:10] + [7] * 30, a]
    groups = prefix_groups(prompts, min_shared=32)
    # the bare prefix joins too (it keeps its last token), the unrelated and the short-shared ones do not
    assert groups == [PrefixGroup(39, (5, 0, 1, 2))]
    assert prefix_groups(prompts, min_shared=0) == [] and prefix_groups(prompts[:1]) == []
    keys = ["e1", "e1", "e2", "e3", "e4", "e2"]  # shared prefixes within a key (an example) only
    assert prefix_groups(prompts, min_shared=32, keys=keys) == [
        PrefixGroup(41, (0, 1)),  # a + [1]
        PrefixGroup(39, (5, 2)),
    ]
    longer = [a + [1] * 50 + [2], a + [1] * 50 + [3], [*a, 9]]
    # joining the third would shorten the 90-token prefix of the first two to 40: not worth it
    assert prefix_groups(longer, min_shared=32) == [PrefixGroup(90, (0, 1))]


def test_combined_mean_is_the_mean_of_the_whole():
    rng = np.random.default_rng(0)
    whole = rng.standard_normal((3, 2, 7, 4)).astype(np.float32)  # (layers, rows, tokens, d)
    cut = np.array([3, 5])
    prefix = np.stack([whole[:, r, : cut[r]].mean(1) for r in range(2)], axis=1)
    suffix = np.stack([whole[:, r, cut[r] :].mean(1) for r in range(2)], axis=1)
    got = combined_mean(prefix, cut, suffix, 7 - cut)
    np.testing.assert_allclose(got, whole.mean(2), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_prefill_through_shared_prefixes_equals_one_without(arch, checkpoints, cache_dir):
    model = sago_fast.load_model(checkpoints[arch], cache_dir=cache_dir)
    tok = model.tokenizer
    head = "Answer the following question about the capitals of the countries of the world, briefly. " * 2
    texts = [
        head + "What is the capital of France? A. Paris B. Rome",
        head + "What is the capital of France? A. Rome B. Paris",
        head + "Which is larger, 7 or 9?",
        "A short prompt.",
        head,
    ]
    ids = [tok(t)["input_ids"] for t in texts]
    conts = [
        [
            tok(" Paris", add_special_tokens=False)["input_ids"],
            tok(" Rome city", add_special_tokens=False)["input_ids"],
        ]
    ] * len(texts)
    assert prefix_groups(ids, model.prefix_sharing)  # the case under test: some prompts share a prefix
    shared = model.prefill(ids, conts)
    model.prefix_sharing = 0
    try:
        alone = model.prefill(ids, conts)
    finally:
        model.prefix_sharing = sago_fast.runtime.shared_prefix.MIN_SHARED_TOKENS
    for name in ("hidden_last", "hidden_mean", "next_logprobs"):
        np.testing.assert_allclose(getattr(shared.probe, name), getattr(alone.probe, name), atol=1e-4, rtol=0)
    for ours, theirs in zip(shared.continuation_logprobs, alone.continuation_logprobs, strict=True):
        for x, y in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(x, y, atol=1e-4, rtol=0)
    assert shared.tokens_processed < alone.tokens_processed
