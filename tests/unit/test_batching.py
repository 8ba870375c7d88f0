from __future__ import annotations

import itertools

import numpy as np
import pytest

from sago_fast.errors import InputError
from sago_fast.runtime.batching import BatchPolicy, left_pad, plan_batches


@pytest.mark.parametrize("budget,max_batch", [(10, 4), (64, 64), (1, 3), (1000, 2)])
def test_plan_covers_every_index_once_within_budget(budget, max_batch):
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 30, size=57)
    batches = plan_batches(lengths, BatchPolicy(token_budget=budget, max_batch=max_batch))
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(57))
    for batch in batches:
        assert len(batch) <= max_batch
        assert len(batch) == 1 or len(batch) * lengths[batch].max() <= budget


def test_batches_group_similar_lengths():
    lengths = [1, 50, 2, 49, 3, 48]
    batches = plan_batches(lengths, BatchPolicy(token_budget=150, max_batch=3))
    assert [sorted(b.tolist()) for b in batches] == [[1, 3, 5], [0, 2, 4]]


def _plan_cost(lengths, batches, overhead):
    return sum(len(b) * max(int(lengths[b].max()), 1) + overhead for b in batches)


def _cheapest_contiguous_plan(sorted_lengths, policy):
    """Brute force over every way to cut the sorted prompts into runs (2 ** (n - 1) plans)."""
    n = len(sorted_lengths)
    best = None
    for mask in range(2 ** (n - 1)):
        bounds = [0, *[i + 1 for i in range(n - 1) if mask >> i & 1], n]
        runs = [sorted_lengths[a:b] for a, b in itertools.pairwise(bounds)]
        if any(
            len(r) > policy.max_batch or (len(r) > 1 and len(r) * max(r) > policy.token_budget) for r in runs
        ):
            continue
        cost = sum(len(r) * max(r) + policy.call_overhead for r in runs)
        best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("overhead", [0, 5, 40])
def test_plan_pads_least(seed, overhead):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, size=11)
    policy = BatchPolicy(token_budget=90, max_batch=5, call_overhead=overhead)
    batches = plan_batches(lengths, policy)
    assert sorted(np.concatenate(batches).tolist()) == list(range(11))
    assert _plan_cost(lengths, batches, overhead) == _cheapest_contiguous_plan(
        sorted(lengths, reverse=True), policy
    )


def test_one_long_prompt_does_not_pad_the_short_ones():
    lengths = np.array([200] + [60] * 40)
    batches = plan_batches(lengths, BatchPolicy(token_budget=8192, max_batch=64, call_overhead=256))
    assert [len(b) for b in batches] == [1, 40]  # greedy cutting at the budget padded all 41 to 200


def test_left_pad():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    np.testing.assert_array_equal(ids, [[5, 6, 7], [0, 0, 8]])
    np.testing.assert_array_equal(mask, [[1, 1, 1], [0, 0, 1]])
    assert ids.dtype == np.int64 and mask.dtype == np.int64


def test_bad_policy():
    with pytest.raises(InputError):
        BatchPolicy(token_budget=0)
    with pytest.raises(InputError):
        BatchPolicy(call_overhead=-1)


def test_device_names():
    from sago_fast.errors import DeviceError
    from sago_fast.runtime.session import providers_for, resolve_device

    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") in ("cpu", "cuda")
    assert providers_for("cuda") == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert providers_for("cpu") == ["CPUExecutionProvider"]
    with pytest.raises(DeviceError, match="one of cpu, cuda, auto"):
        resolve_device("tpu")


def test_block_groups_are_split_to_the_logits_budget():
    from sago_fast.runtime.prefill.continuations import LOGITS_BYTES, _within_logits_budget

    continuations = [[[1] * 5, [2] * 9] for _ in range(40)]  # 80 blocks of 6 and 10 tokens
    rows = [(r, j) for r in range(40) for j in range(2)]
    groups = [np.arange(0, 50), np.arange(50, 80)]
    vocab = 128256
    split = _within_logits_budget(groups, rows, continuations, vocab)
    assert np.concatenate(split).tolist() == list(range(80))  # every row once, in order
    for group in split:
        block = 1 + max(len(continuations[rows[g][0]][rows[g][1]]) for g in group)
        assert len(group) * block * vocab * 12 <= LOGITS_BYTES or len(group) == 1
    assert len(split) > 2
    same = _within_logits_budget(groups, rows, continuations, 512)  # small vocabularies: as planned
    assert [g.tolist() for g in same] == [g.tolist() for g in groups]


def test_block_passes_group_rows_of_similar_width():
    from sago_fast.runtime.prefill.continuations import _block_groups

    widths = np.array([30, 2, 28, 3, 0])  # option tokens per prompt row (the last has none to score)
    groups = _block_groups(widths, np.flatnonzero(widths), vocab=1000)
    # one pass of 4 rows pads to 31: 124 + 48; two passes of similar widths: 62 + 8 + 96, fewer
    assert [g.tolist() for g in groups] == [[0, 2], [1, 3]]
    together = _block_groups(np.array([5, 6, 5, 0]), np.array([0, 1, 2]), vocab=1000)
    assert together == [slice(0, 3)]  # consecutive rows: a slice, the cache fed as it is
