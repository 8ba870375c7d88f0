"""Prefix trees: planned by hand, and a prefill along them equal to one without (tiny Llama, GPT-2)."""

from __future__ import annotations

import numpy as np
import pytest

import sago_fast
from sago_fast.runtime.batching import BatchPolicy
from sago_fast.runtime.prefill.shared_prefix import (
    PrefixTree,
    combined_mean,
    common_heads,
    head_groups,
    prefix_trees,
)


def test_trees_by_hand():
    a = list(range(40))
    prompts = [[*a, 1, 2], [*a, 1, 3], [*a, 9], list(range(100, 150)), a[:10] + [7] * 30, a]
    # anchor 0 shares the most (ties go to the first); shared prefixes 41, 40, 0, 10, 39 (the bare prefix
    # keeps its last token): cuts at 10 and 39 (40 and 41 are within 8 of 39); the unrelated one is out
    assert prefix_trees(prompts, min_shared=8) == [
        PrefixTree(0, (10, 39, 42), ((1, 1), (2, 1), (4, 0), (5, 1)))
    ]
    assert prefix_trees(prompts, min_shared=0) == [] and prefix_trees(prompts[:1]) == []
    keys = ["e1", "e1", "e2", "e3", "e4", "e2"]  # shared prefixes within a key (an example) only
    assert prefix_trees(prompts, min_shared=8, keys=keys) == [
        PrefixTree(0, (41, 42), ((1, 0),)),  # a + [1]
        PrefixTree(5, (40,), ((2, 0),)),  # the bare prefix is the anchor: [*a, 9] continues its whole cache
    ]
    assert prefix_trees(prompts, min_shared=11, keys=keys)[0] == PrefixTree(0, (41, 42), ((1, 0),))


def test_a_tree_for_each_start():
    # lm-eval's few-shot prompts: each subject's items start with its description and examples; without
    # keys, every group of prompts that start alike gets its own tree (before: one tree, one subject)
    x, y = list(range(50)), list(range(200, 240))
    prompts = [[*x, 1, 2], [*y, 5], [*x, 3], [*y, 6, 7], [*x, 4], [9] * 45]
    assert prefix_trees(prompts, min_shared=32) == [
        PrefixTree(0, (50, 52), ((2, 0), (4, 0))),
        PrefixTree(1, (40, 41), ((3, 0),)),
    ]
    # with keys, the start splits a key's prompts further; the tree the key alone gave is kept as it was
    keys = ["k", "k", "k", "k", "j", "k"]
    assert prefix_trees(prompts, min_shared=32, keys=keys) == [
        PrefixTree(0, (50, 52), ((2, 0),)),
        PrefixTree(1, (40, 41), ((3, 0),)),
    ]


def test_combined_mean_is_the_mean_of_the_whole():
    rng = np.random.default_rng(0)
    whole = rng.standard_normal((3, 2, 7, 4)).astype(np.float32)  # (layers, rows, tokens, d)
    cut = np.array([3, 5])
    prefix = np.stack([whole[:, r, : cut[r]].mean(1) for r in range(2)], axis=1)
    suffix = np.stack([whole[:, r, cut[r] :].mean(1) for r in range(2)], axis=1)
    got = combined_mean(prefix, cut, suffix, 7 - cut)
    np.testing.assert_allclose(got, whole.mean(2), rtol=1e-6, atol=1e-6)


def prefill_without_sharing(model, ids, conts):
    """The model's prefill of ``ids`` with no shared prefix at all (every prompt from its first token)."""
    model.engine.prefix_sharing = 0
    try:
        return model.prefill(ids, conts)
    finally:
        model.engine.prefix_sharing = sago_fast.runtime.prefill.shared_prefix.MIN_SHARED_TOKENS


def assert_same_prefill(shared, alone):
    """Pooled states, next-token distributions and option log-probs of two prefills within 1e-4."""
    for name in ("hidden_last", "hidden_mean", "next_logprobs"):
        np.testing.assert_allclose(getattr(shared.probe, name), getattr(alone.probe, name), atol=1e-4, rtol=0)
    for ours, theirs in zip(shared.continuation_logprobs, alone.continuation_logprobs, strict=True):
        for x, y in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(x, y, atol=1e-4, rtol=0)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_prefill_through_shared_prefixes_equals_one_without(arch, checkpoints, cache_dir):
    model = sago_fast.load_model(checkpoints[arch], cache_dir=cache_dir)
    tok = model.tokenizer
    head = "Answer the following question about the capitals of the countries of the world, briefly. " * 2
    question = "What is the capital of France, the country in western Europe? A. Paris B. Rome"
    texts = [
        head + question,
        head + "What is the capital of France, the country in western Europe? A. Rome B. Paris",
        head + "Which is larger, 7 or 9?",
        "A short prompt.",
        head,
        head + question + " I think the answer is B, but I'm not sure.",  # continues the whole anchor
    ]
    ids = [tok(t)["input_ids"] for t in texts]
    conts = [
        [
            tok(" Paris", add_special_tokens=False)["input_ids"],
            tok(" Rome city", add_special_tokens=False)["input_ids"],
        ]
    ] * len(texts)
    trees = prefix_trees(ids, model.engine.prefix_sharing)  # the case under test: a tree in several pieces
    assert len(trees) == 1 and len(trees[0].ends) >= 3 and len(trees[0].members) == 4
    shared = model.prefill(ids, conts)
    alone = prefill_without_sharing(model, ids, conts)
    assert_same_prefill(shared, alone)
    assert shared.tokens_processed < alone.tokens_processed


def test_prefill_along_a_tree_per_start_equals_one_without(checkpoints, cache_dir):
    """Prompts of two kinds of start (two subjects' few-shot heads) prefill along two trees, with the
    values of prompts prefilled alone."""
    model = sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir)
    tok = model.tokenizer
    heads = [
        "The following are questions about the capitals of the countries of the world, answered briefly. "
        * 2,
        "Here come some questions on small whole numbers and their sums, each answered with a number. " * 2,
    ]
    texts = [
        heads[0] + "What is the capital of France? A. Paris B. Rome",
        heads[1] + "What is 2 + 2? A. 4 B. 5",
        heads[0] + "What is the capital of Italy? A. Paris B. Rome",
        heads[1] + "What is 3 + 4? A. 6 B. 7",
    ]
    ids = [tok(t)["input_ids"] for t in texts]
    conts = [
        [tok(" A", add_special_tokens=False)["input_ids"], tok(" B", add_special_tokens=False)["input_ids"]]
    ]
    trees = prefix_trees(ids, model.engine.prefix_sharing)
    assert sorted(sorted((t.anchor, *(m for m, _ in t.members))) for t in trees) == [[0, 2], [1, 3]]
    shared = model.prefill(ids, conts * len(ids))
    alone = prefill_without_sharing(model, ids, conts * len(ids))
    assert_same_prefill(shared, alone)
    assert shared.tokens_processed < alone.tokens_processed


def test_head_groups_by_hand():
    h = list(range(40))
    prompts = [[*h, 1, 2], [*h, 3], h, [*h[:39], 9, 4], [7, 8, 9]]
    # a head must leave the prompt a token of its own; prompts are grouped by their head's tokens
    assert head_groups(prompts, [40, 40, 40, 40, 0]) == {tuple(h): [0, 1], (*h[:39], 9): [3]}
    assert head_groups(prompts, [40, 0, 0, 39, 0]) == {tuple(h): [0], tuple(h[:39]): [3]}
    assert head_groups(prompts, [40, 40, 40, 40, 0], enabled=False) == {}
    # a head is one pass more: kept where it saves at least min_saved tokens ((prompts - 1) x head), so
    # a head one prompt alone has is not
    assert head_groups(prompts, [40, 40, 40, 40, 0], min_saved=40) == {tuple(h): [0, 1]}
    assert head_groups(prompts, [40, 40, 40, 40, 0], min_saved=41) == {}


def test_common_heads_by_hand():
    # lm-eval's 0-shot prompts: the same opening, then each item's own text; grouped by their first
    # HEAD_START (4) tokens, a group's head is all it shares, each prompt keeping a token of its own
    opening = list(range(10))
    prompts = [
        [*opening, 50, 1],
        [*opening, 60],
        [*opening, 50, 2, 3],
        [7, 8, 9, 10, 11, 12],  # another task's prompts: their own head
        [7, 8, 9, 10, 13],
        list(opening),  # the opening alone keeps its last token
        [1, 2, 3, 4, 5],  # alone with its start: no head
        [7, 8],  # shorter than a start
    ]
    assert common_heads(prompts) == [10, 10, 10, 4, 4, 9, 0, 0]
    # a longer start splits the opening's group: only the two that go on with 50 still share
    assert common_heads(prompts, start=11) == [11, 0, 11, 0, 0, 0, 0, 0]
    assert common_heads([]) == []


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_prefill_on_shared_heads_equals_one_without(arch, checkpoints, cache_dir):
    """A benchmark's few-shot head shared across examples: prefilled once, each example's renderings
    along their own tree on its cache (and one rendering alone on it), with the values of prompts
    prefilled without any sharing; the head's tokens go through the model once."""
    model = sago_fast.load_model(checkpoints[arch], cache_dir=cache_dir, batch_policy=BatchPolicy(400, 3))
    tok = model.tokenizer
    head = "The following are questions about the capitals of the countries of the world. " * 2
    texts, keys = [], []
    for example, question in enumerate(
        [
            "What is the capital of France in western Europe?",
            "What is the capital of Italy in southern Europe?",
        ]
    ):
        for options in ("A. Paris B. Rome", "A. Rome B. Paris", "A. Madrid B. Paris"):
            texts.append(f"{head}{question} {options}")
            keys.append(f"e{example}")
    texts.append(head + "Which is larger?")  # a third example: one rendering, alone on the head
    keys.append("e2")
    ids = [tok(t)["input_ids"] for t in texts]
    n_head = len(tok(head.rstrip())["input_ids"]) - 1  # the head's tokens all prompts share
    assert all(i[:n_head] == ids[0][:n_head] for i in ids)
    conts = [
        [
            tok(" Paris", add_special_tokens=False)["input_ids"],
            tok(" Rome city", add_special_tokens=False)["input_ids"],
        ]
    ] * len(ids)
    plain = model.prefill(ids, conts, share_keys=keys)
    on_head = model.prefill(ids, conts, share_keys=keys, heads=[n_head] * len(ids))
    alone = prefill_without_sharing(model, ids, conts)
    assert_same_prefill(on_head, alone)
    assert_same_prefill(plain, alone)
    # each example's tree computed the head once (3 examples); on the shared head it is computed once
    assert on_head.tokens_processed == plain.tokens_processed - 2 * n_head
