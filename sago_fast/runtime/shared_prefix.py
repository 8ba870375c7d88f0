"""Prompts that share a long token prefix: the prefix is prefilled once, each prompt continues from it.

The renderings of one example share most of their tokens with each other (an option permutation keeps the
question, a wrong hint appends a sentence, a punctuation change touches the end): a prefix tree per example
prefills ~72% of the tokens of MMLU-like items. :func:`prefix_groups` finds such groups among the prompts of
one call: prompts sorted by their token ids, each joining its neighbour's group when the common prefix is at
least ``min_shared`` tokens (leaving every member one token of its own) and joining prefills fewer tokens
than starting a new group would.

A member's pass continues the prefix's KV cache (``past``) with its own tokens, left-padded within the
block; the mask marks the hole, and positions come from the mask, so every row sees exactly its prompt.
Pooled means combine the prefix's and the suffix's: ``(p · mean_prefix + s · mean_suffix) / (p + s)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_SHARED_TOKENS = 32  # shorter shared prefixes are not worth a pass and a cache copy of their own


@dataclass(frozen=True)
class PrefixGroup:
    """Prompts (indices into the call's prompts) whose first ``length`` tokens are the same."""

    length: int
    members: tuple[int, ...]


@dataclass(frozen=True)
class PrefixPass:
    """The prefill of a batch of groups' prefixes: ids, mask (groups, P) left-padded, and the graph's
    outputs (``present.*`` caches, pooled ``hidden_mean`` over each prefix)."""

    groups: tuple[PrefixGroup, ...]
    ids: np.ndarray
    mask: np.ndarray
    out: dict[str, np.ndarray]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def prefix_groups(
    token_ids: Sequence[Sequence[int]],
    min_shared: int = MIN_SHARED_TOKENS,
    keys: Sequence[str] | None = None,
) -> list[PrefixGroup]:
    """Groups of at least two prompts sharing at least ``min_shared`` leading tokens (each member keeps at
    least one token beyond the prefix) and, with ``keys``, the same key; prompts in no group are left
    out. min_shared 0: no groups."""
    if min_shared <= 0 or len(token_ids) < 2:
        return []

    def key_of(i: int) -> str:
        return keys[i] if keys is not None else ""

    order = sorted(range(len(token_ids)), key=lambda i: (key_of(i), list(token_ids[i])))
    groups: list[PrefixGroup] = []
    members = [order[0]]
    length = len(token_ids[order[0]]) - 1
    for i in order[1:]:
        shared = min(common_prefix(token_ids[members[-1]], token_ids[i]), length, len(token_ids[i]) - 1)
        k = len(members)
        # joining shortens the prefix of the k members already in: worth it when k * shared > (k - 1) * length
        same_key = key_of(i) == key_of(members[-1])
        if same_key and shared >= min_shared and k * shared > (k - 1) * length:
            members.append(i)
            length = shared
            continue
        if len(members) > 1:
            groups.append(PrefixGroup(length, tuple(members)))
        members, length = [i], len(token_ids[i]) - 1
    if len(members) > 1:
        groups.append(PrefixGroup(length, tuple(members)))
    return groups


def combined_mean(
    prefix_mean: np.ndarray, prefix_len: np.ndarray, suffix_mean: np.ndarray, suffix_len: np.ndarray
) -> np.ndarray:
    """Masked means over whole prompts from those over their prefix and their suffix.

    prefix_mean, suffix_mean: (layers, rows, d); prefix_len, suffix_len: (rows,) real tokens of each part."""
    total = (prefix_len + suffix_len).astype(np.float32)  # (rows,)
    weighted = prefix_mean * prefix_len[None, :, None] + suffix_mean * suffix_len[None, :, None]
    return (weighted / total[None, :, None]).astype(np.float32)
