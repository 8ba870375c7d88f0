"""Prefill along prefix trees (:mod:`sago_fast.runtime.prefill.shared_prefix`): each anchor in pieces, each other
prompt continuing the anchor's KV cache at its cut.

A batch of anchors goes through its pieces together: pass j feeds every anchor's j-th piece (left-padded
within the block) on the cache of pass j - 1, the mask growing with holes where a piece was shorter than
the block. After pass j, the prompts that continue at that cut take their anchor's cache rows, and the
anchors whose last piece it was are handed over as whole prompts. Only the last pass's cache is kept, so
memory holds one batch's cache, as a plain prefill does. Pooled means add up over the pieces (token-
weighted), the last token's hidden state and the next-token distribution come from the last piece.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sago_fast.runtime.batching import left_pad, plan_batches, run_with_backoff
from sago_fast.runtime.kv_cache import KVCache
from sago_fast.runtime.passes import Passes, TokenCounts
from sago_fast.runtime.prefill.shared_prefix import PrefixTree, combined_mean, prefix_trees

OnPrefill = Callable[..., None]  # (prompt indices, ids, mask, outputs, new tokens) -> None


@dataclass
class _Prefix:
    """The anchors of a batch after some pieces, in row order: their trees, ids and mask so far (rows, W),
    their KV cache so far, the last pass's last-token outputs (``hidden_last``, ``next_logprobs``), and the
    token-weighted sum of hidden means (layers, rows, d) over ``counts`` (rows,) real tokens."""

    trees: list[PrefixTree]
    ids: np.ndarray
    mask: np.ndarray
    cache: KVCache
    last: dict[str, np.ndarray]
    sums: np.ndarray
    counts: np.ndarray

    def keep(self, rows: list[int], passes: Passes) -> _Prefix:
        """Only ``rows`` (positions), their cache rows gathered."""
        return self._gathered(np.asarray(rows, dtype=np.int64), [self.trees[r] for r in rows], passes)

    def _gathered(self, picked: np.ndarray, trees: list[PrefixTree], passes: Passes) -> _Prefix:
        return _Prefix(
            trees,
            self.ids[picked],
            self.mask[picked],
            passes.kv_cache(_as_presents(self.cache.rows(picked))),
            {
                name: value[picked] if value.ndim == 2 else value[:, picked]
                for name, value in self.last.items()
            },
            self.sums[:, picked],
            self.counts[picked],
        )

    def mean(self) -> np.ndarray:
        return (self.sums / self.counts[None, :, None]).astype(np.float32)

    def repeated(self, trees: list[PrefixTree], passes: Passes) -> _Prefix:
        """This one-row prefix (a shared head) as the start of every anchor of ``trees``."""
        return self._gathered(np.zeros(len(trees), dtype=np.int64), list(trees), passes)


def _as_presents(past: dict[str, Any]) -> dict[str, Any]:
    """Past inputs named back as the ``present.*`` outputs they came from."""
    return {name.replace("past_key_values.", "present.", 1): value for name, value in past.items()}


@dataclass(frozen=True)
class PrefillCall:
    """What every pass of one prefill shares: the engine's passes, the prompts' token ids, where outputs go
    (``on_prefill``), the token counters, whether the prompts' own caches are wanted afterwards, and the
    head every prompt continues (``start``, its ``base`` tokens; None: the prompts start from nothing)."""

    passes: Passes
    token_ids: Sequence[Sequence[int]]
    on_prefill: OnPrefill
    tokens: TokenCounts
    keep_cache: bool
    base: int = 0
    start: _Prefix | None = None


def prefill_trees(call: PrefillCall, trees: Sequence[PrefixTree]) -> None:
    """Every prompt of ``trees`` (``call``: the prefill they belong to): anchors batched by length under
    the batch policy, each batch through its pieces, the continuing prompts after the piece they share."""
    passes = call.passes
    lengths = np.array([len(call.token_ids[t.anchor]) for t in trees], dtype=np.int64)
    for batch in plan_batches(lengths, passes.batch_policy):
        run_with_backoff(functools.partial(_anchor_batch, call, trees), batch, passes.shrink_batches)


def _anchor_batch(call: PrefillCall, trees: Sequence[PrefixTree], batch: np.ndarray) -> None:
    passes = call.passes
    chosen = [trees[i] for i in batch]
    prefix = None if call.start is None else call.start.repeated(chosen, passes)
    for piece in range(max(len(t.ends) for t in chosen)):
        active = [t for t in chosen if piece < len(t.ends)]
        if prefix is not None and len(active) < len(prefix.trees):
            prefix = prefix.keep([r for r, t in enumerate(prefix.trees) if piece < len(t.ends)], passes)
        prefix = _next_piece(call, active, piece, prefix)
        continuing = [(r, m) for r, t in enumerate(prefix.trees) for m, at in t.members if at == piece]
        if continuing:
            _continue_all(call, prefix, continuing)
        done = [r for r, t in enumerate(prefix.trees) if piece == len(t.ends) - 1]
        if done:
            _hand_over(call, prefix, done)


def _next_piece(call: PrefillCall, trees: list[PrefixTree], piece: int, prefix: _Prefix | None) -> _Prefix:
    """One pass over the anchors' ``piece``-th pieces on the cache so far."""
    passes, token_ids = call.passes, call.token_ids
    parts = [token_ids[t.anchor][(t.ends[piece - 1] if piece else call.base) : t.ends[piece]] for t in trees]
    ids, new_mask = left_pad(parts, passes.pad_id)  # (rows, w) each
    if prefix is None:
        mask, past = new_mask, None
    else:
        mask = np.concatenate([prefix.mask, new_mask], axis=1)
        past = prefix.cache.rows(slice(None))  # every row: no copy
    out = passes.run_chunked(ids, mask, past, cache=True)
    if prefix is not None:
        ids = np.concatenate([prefix.ids, ids], axis=1)
    n_new = new_mask.sum(1)  # (rows,)
    call.tokens["prefill"] += int(n_new.sum())
    sums = out["hidden_mean"].astype(np.float64) * n_new[None, :, None]
    if prefix is not None:
        sums += prefix.sums
        n_new = n_new + prefix.counts
    last = {"hidden_last": out["hidden_last"], "next_logprobs": out["next_logprobs"]}
    return _Prefix(list(trees), ids, mask, passes.kv_cache(out), last, sums, n_new)


def _hand_over(call: PrefillCall, prefix: _Prefix, rows: list[int]) -> None:
    """The anchors at ``rows`` are whole: their outputs, as a prefill of the whole prompts would give them."""
    picked = np.asarray(rows)
    out = {
        "hidden_last": prefix.last["hidden_last"][:, picked],
        "hidden_mean": prefix.mean()[:, picked],
        "next_logprobs": prefix.last["next_logprobs"][picked],
    }
    if call.keep_cache:
        out.update(_as_presents(prefix.cache.rows(picked)))
    anchors = np.array([prefix.trees[r].anchor for r in rows])
    call.on_prefill(anchors, prefix.ids[picked], prefix.mask[picked], out, 0)  # their tokens are counted
    call.passes.progress.advance(len(rows), int(prefix.counts[picked].sum()))


def _continue_all(call: PrefillCall, prefix: _Prefix, continuing: list[tuple[int, int]]) -> None:
    """The prompts ``continuing`` (anchor row, prompt) after the current piece, batched by cost."""
    passes = call.passes
    width = prefix.mask.shape[1]
    costs = np.array([width + len(call.token_ids[i]) - int(prefix.counts[r]) for r, i in continuing])
    run = functools.partial(_continue, call, prefix, continuing)
    passes.run_batches(plan_batches(costs, passes.batch_policy), run, call.tokens)


def _continue(
    call: PrefillCall, prefix: _Prefix, continuing: list[tuple[int, int]], batch: np.ndarray
) -> None:
    """One pass of the prompts ``continuing[batch]`` on their anchors' caches, handed to ``on_prefill`` as
    a prefill of the whole prompts (means combined, ids and mask of prefix + own)."""
    passes, token_ids = call.passes, call.token_ids
    owners = np.array([continuing[b][0] for b in batch])
    prompts = np.array([continuing[b][1] for b in batch])
    shared = prefix.counts[owners]
    own_ids, own_mask = left_pad(
        [token_ids[i][int(n) :] for i, n in zip(prompts, shared, strict=True)], passes.pad_id
    )
    mask = np.concatenate([prefix.mask[owners], own_mask], axis=1)  # (rows, prefix + own)
    past = prefix.cache.rows(owners)
    result = passes.run_chunked(own_ids, mask, past, cache=call.keep_cache)
    result["hidden_mean"] = combined_mean(
        prefix.mean()[:, owners], shared, result["hidden_mean"], own_mask.sum(1)
    )
    ids = np.concatenate([prefix.ids[owners], own_ids], axis=1)
    call.on_prefill(prompts, ids, mask, result, int(own_mask.sum()))


def prefill_on_head(call: PrefillCall, members: Sequence[int], head: int, keys: Sequence[str]) -> None:
    """The prompts ``members`` (indices into ``call.token_ids``), which all start with the same ``head``
    tokens: the head prefilled once, then each key's prompts along their prefix tree on its cache (cuts
    after the head), the others continuing the head's cache alone."""
    passes, token_ids, on_prefill = call.passes, call.token_ids, call.on_prefill
    ids = np.asarray([token_ids[members[0]][:head]], dtype=np.int64)  # (1, head)
    mask = np.ones_like(ids)
    out = passes.run_chunked(ids, mask, None, cache=True)
    call.tokens["prefill"] += head
    last = {"hidden_last": out["hidden_last"], "next_logprobs": out["next_logprobs"]}
    sums = out["hidden_mean"].astype(np.float64) * head
    start = _Prefix([], ids, mask, passes.kv_cache(out), last, sums, np.array([head], dtype=np.int64))
    index = np.asarray(members)
    own = [token_ids[i] for i in members]

    def on_member(batch: np.ndarray, *rest: Any) -> None:
        on_prefill(index[np.asarray(batch)], *rest)

    on_head = PrefillCall(passes, own, on_member, call.tokens, call.keep_cache, base=head, start=start)
    trees, alone = [], set(range(len(own)))
    for tree in prefix_trees(own, passes.prefix_sharing, [keys[i] for i in members]):
        after = sum(1 for end in tree.ends if end <= head)  # cuts within the head are the head's
        kept = tuple((m, piece - after) for m, piece in tree.members if piece >= after)
        trees.append(PrefixTree(tree.anchor, tree.ends[after:], kept))
        alone -= {tree.anchor, *(m for m, _ in kept)}
    if alone:
        _continue_all(on_head, start, [(0, i) for i in sorted(alone)])
    prefill_trees(on_head, trees)
