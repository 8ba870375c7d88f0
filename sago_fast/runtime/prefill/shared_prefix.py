"""A prefix tree per example: every rendering continues from the longest prefix it shares with one computed.

The renderings of one example share most of their tokens with each other (an option permutation keeps the
question, a wrong hint appends a sentence, a punctuation change touches the end): on 100 real MMLU items
a prefix tree per example holds 75% of their prompt tokens. :func:`prefix_trees` plans it among the
prompts of one call that share a key (their example): the *anchor*, the prompt that shares the most with
the others, is prefilled in pieces cut where the others leave it, and each other prompt continues the
anchor's KV cache at the cut it shares (its longest common prefix with the anchor, rounded down to a cut).
On those items that prefills exactly the tree's tokens: the renderings' shared prefixes are prefixes of
the canonical one.

Cuts are kept ``min_shared`` tokens from the start and from each other (a piece is one more pass over the
anchors of a batch), and every prompt keeps at least one token of its own. A continuing pass left-pads
its own tokens within the block; the mask marks the holes, and positions come from the mask, so every row
sees exactly its prompt. Pooled means combine the pieces': ``(p · mean_prefix + s · mean_suffix) / (p + s)``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sago_fast.defaults import MIN_SHARED_TOKENS

HEAD_START = 4  # common_heads groups prompts by this many first tokens


@dataclass(frozen=True)
class PrefixTree:
    """The prompts of one key (indices into the call's prompts) that share a prefix with its anchor.

    anchor: prefilled in pieces ending at ``ends`` (increasing; the last is the anchor's length);
    members: (prompt, piece) pairs: the prompt continues the anchor's cache after piece ``piece``, i.e.
    from its first ``ends[piece]`` tokens."""

    anchor: int
    ends: tuple[int, ...]
    members: tuple[tuple[int, int], ...]

    def renumbered(self, index: Sequence[int]) -> PrefixTree:
        """The tree with each prompt ``i`` named ``index[i]`` (planned on a subset of a call's prompts)."""
        return PrefixTree(index[self.anchor], self.ends, tuple((index[m], p) for m, p in self.members))


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _shared(token_ids: Sequence[Sequence[int]], i: int, anchor: int) -> int:
    """Tokens prompt i can take from the anchor's cache: their common prefix, one of its own kept."""
    return min(common_prefix(token_ids[i], token_ids[anchor]), len(token_ids[i]) - 1)


def _tree(token_ids: Sequence[Sequence[int]], rows: list[int], min_shared: int) -> PrefixTree | None:
    """The tree of one key's prompts: the anchor sharing the most tokens with the others, cuts kept
    ``min_shared`` apart, each other prompt at the last cut within its shared prefix (None: no sharing)."""

    def gain(anchor: int) -> int:
        return sum(s for i in rows if i != anchor and (s := _shared(token_ids, i, anchor)) >= min_shared)

    anchor = max(rows, key=lambda r: (gain(r), -r))
    shared = {i: _shared(token_ids, i, anchor) for i in rows if i != anchor}
    cuts: list[int] = []
    for length in sorted(set(shared.values())):
        if length >= (cuts[-1] if cuts else 0) + min_shared:
            cuts.append(length)
    members = []
    for i, length in shared.items():
        usable = [c for c in cuts if c <= length]
        if usable:
            members.append((i, usable[-1]))
    if not members:
        return None
    full = len(token_ids[anchor])
    ends = sorted({c for _, c in members if c < full} | {full})
    return PrefixTree(anchor, tuple(ends), tuple((i, ends.index(c)) for i, c in sorted(members)))


def prefix_trees(
    token_ids: Sequence[Sequence[int]],
    min_shared: int = MIN_SHARED_TOKENS,
    keys: Sequence[str] | None = None,
) -> list[PrefixTree]:
    """A tree for each group of prompts with the same key (default: one key for all) and the same first
    ``min_shared`` tokens, whose prompts share at least ``min_shared`` leading tokens with its anchor;
    prompts in no tree are left out. min_shared 0: no trees.

    Only prompts that start alike can share ``min_shared`` tokens, so grouping by the start loses no tree
    the key alone would give, and finds one per kind of start: lm-eval's few-shot prompts get a tree per
    subject (its description and examples), not one for the subject of the best anchor."""
    if min_shared <= 0 or len(token_ids) < 2:
        return []
    by_key: dict[tuple[str, tuple[int, ...]], list[int]] = defaultdict(list)
    for i in range(len(token_ids)):
        by_key[(keys[i] if keys is not None else "", tuple(token_ids[i][:min_shared]))].append(i)
    trees = [_tree(token_ids, rows, min_shared) for rows in by_key.values() if len(rows) > 1]
    return [t for t in trees if t is not None]


def head_groups(
    token_ids: Sequence[Sequence[int]],
    heads: Sequence[int],
    enabled: bool = True,
    min_saved: int = 0,
) -> dict[tuple[int, ...], list[int]]:
    """The prompts of each head: head tokens -> the prompts that start with them (``heads[i]`` tokens of
    prompt i, at least one token of its own left; ``enabled`` False: no heads). A head is the part of a
    prompt that renderings of other examples share by design (a benchmark's instruction and
    demonstrations, the opening of a task's every prompt); every prompt with a kept head goes on from it.

    A head is prefilled once for its prompts, one pass more, and its prompts can share no prefix tree with
    prompts outside it: it is kept only where its prompts save at least ``min_saved`` tokens together
    ((prompts - 1) x its tokens). A head one rendering alone has (a reworded instruction) is not, and that
    rendering goes along its example's tree instead. Whether a head is kept thus depends on the other
    prompts of the call; the numbers differ by float noise only (~1e-5)."""
    if not enabled:
        return {}
    found: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for i, head in enumerate(heads):
        if 0 < head < len(token_ids[i]):
            found[tuple(token_ids[i][:head])].append(i)
    return {head: members for head, members in found.items() if (len(members) - 1) * len(head) >= min_saved}


def common_heads(token_ids: Sequence[Sequence[int]], start: int = HEAD_START) -> list[int]:
    """heads[i] for prompts that nobody marked: the longest prefix prompt i shares with every prompt of
    the call that begins with the same ``start`` tokens (0 where no other does), each prompt keeping a
    token of its own. lm-eval's MMLU prompts all open with "The following are multiple choice questions
    (with answers) about": ~11 of a 0-shot prompt's ~110 tokens, too short for a prefix tree
    (``MIN_SHARED_TOKENS``) but, shared by hundreds of prompts, worth one pass (:func:`head_groups`
    decides). Prompts of other starts (another task's) get their own group's head.

    The longest prefix a group shares is the one its lexicographically first and last prompts share."""
    by_start: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for i, ids in enumerate(token_ids):
        if len(ids) > start:
            by_start[tuple(ids[:start])].append(i)
    heads = [0] * len(token_ids)
    for rows in by_start.values():
        if len(rows) < 2:
            continue
        first = min(rows, key=lambda r: tuple(token_ids[r]))
        last = max(rows, key=lambda r: tuple(token_ids[r]))
        shared = common_prefix(token_ids[first], token_ids[last])
        for r in rows:
            heads[r] = min(shared, len(token_ids[r]) - 1)
    return heads


def combined_mean(
    prefix_mean: np.ndarray, prefix_len: np.ndarray, suffix_mean: np.ndarray, suffix_len: np.ndarray
) -> np.ndarray:
    """Masked means over whole prompts from those over their prefix and their suffix.

    prefix_mean, suffix_mean: (layers, rows, d); prefix_len, suffix_len: (rows,) real tokens of each part."""
    total = (prefix_len + suffix_len).astype(np.float32)  # (rows,)
    weighted = prefix_mean * prefix_len[None, :, None] + suffix_mean * suffix_len[None, :, None]
    return (weighted / total[None, :, None]).astype(np.float32)
