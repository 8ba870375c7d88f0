"""Length bucketing, token-budget batches and left padding."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BatchPolicy:
    """How prompts are grouped into ORT calls.

    token_budget: maximum padded tokens (batch * longest prompt) in one call.
    max_batch: maximum prompts in one call, whatever their length.
    """

    token_budget: int = 8192
    max_batch: int = 64

    def __post_init__(self) -> None:
        if self.token_budget < 1 or self.max_batch < 1:
            raise ValueError("token_budget and max_batch must be positive")


def plan_batches(
    lengths: Sequence[int] | np.ndarray, policy: BatchPolicy = BatchPolicy()
) -> list[np.ndarray]:
    """Group prompt indices into batches of similar length within the token budget.

    Prompts are sorted by length (longest first, stable), then cut greedily so that
    ``len(batch) * max_len(batch) <= token_budget`` (a single prompt longer than the budget forms its
    own batch). Returns index arrays that together cover every prompt exactly once.
    """
    lengths = np.asarray(lengths, dtype=np.int64)  # (n,)
    order = np.argsort(-lengths, kind="stable")
    batches: list[np.ndarray] = []
    start = 0
    n = len(order)
    while start < n:
        longest = int(lengths[order[start]])  # sorted descending: the first is the longest
        size = max(1, min(policy.max_batch, policy.token_budget // max(longest, 1)))
        batches.append(order[start : start + size])
        start += size
    return batches


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Left-pad token id lists. Returns (input_ids, attention_mask), both (batch, max_len) int64."""
    width = max(len(s) for s in sequences)
    ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(sequences), width), dtype=np.int64)
    for row, seq in enumerate(sequences):
        if len(seq):
            ids[row, width - len(seq) :] = seq
            mask[row, width - len(seq) :] = 1
    return ids, mask
