"""The prefill engine: every prompt through the graph once, the cheapest way it can go.

:class:`PrefillEngine` is the engine's one typed object. Its passes (:class:`~sago_fast.runtime.passes.Passes`:
a pass, a pass in chunks, a KV cache where it lives, batches shrunk on out of memory) and
:meth:`PrefillEngine.prefill_prompts` on top: prompts sharing a prefix go along their prefix tree
(:mod:`sago_fast.runtime.prefill.tree_prefill`), prompts sharing a head (a benchmark's instruction and
demonstrations) continue one prefill of it, the others go in planned batches. What a prompt's prefill gives
(hidden states, next-token distribution, its cache) goes to the caller's ``on_prefill``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sago_fast.runtime.batching import left_pad, plan_batches
from sago_fast.runtime.passes import Passes, TokenCounts
from sago_fast.runtime.prefill.shared_prefix import PrefixTree, head_groups, prefix_trees
from sago_fast.runtime.prefill.tree_prefill import OnPrefill, PrefillCall, prefill_on_head, prefill_trees


@dataclass(frozen=True)
class PromptSet:
    """Prompts to prefill: their token ids, the length each is batched by (its tokens, plus what will
    follow it), share_keys[i] (prompts share a prefix only with prompts of the same key; None: any),
    heads[i] (prompt i's first tokens that prompts of any key may share; None: none) and the prefix trees
    already planned for them (None: found here)."""

    token_ids: Sequence[Sequence[int]]
    lengths: np.ndarray  # (n,) int64
    share_keys: Sequence[str] | None = None
    heads: Sequence[int] | None = None
    trees: Sequence[PrefixTree] | None = None


class PrefillEngine(Passes):
    """A session's passes, and every prompt's prefill on them (see the module docstring)."""

    def prefill_prompts(
        self, prompts: PromptSet, on_prefill: OnPrefill, tokens: TokenCounts, cache: bool
    ) -> None:
        """Prefill every prompt of ``prompts``; ``on_prefill(batch, ids, mask, outputs, new_tokens)``
        hears of each prefilled batch (with its KV cache when ``cache``), ``tokens`` counts them. A head
        shared across keys is prefilled once when it saves more tokens than a call costs
        (``batch_policy.call_overhead``; :func:`~sago_fast.runtime.prefill.shared_prefix.head_groups`)."""
        token_ids = prompts.token_ids
        n = len(token_ids)
        self.progress.start("prefill", n, "prompt")
        keys = list(prompts.share_keys) if prompts.share_keys is not None else [""] * n
        groups = (
            head_groups(token_ids, prompts.heads, self.prefix_sharing > 0, self.batch_policy.call_overhead)
            if prompts.heads is not None and self.has_kv_cache
            else {}
        )
        on_heads = {i for members in groups.values() for i in members}
        others = [i for i in range(n) if i not in on_heads]
        trees = prompts.trees
        if trees is None and self.has_kv_cache:
            found = prefix_trees(
                [token_ids[i] for i in others], self.prefix_sharing, [keys[i] for i in others]
            )
            trees = [t.renumbered(others) for t in found]
        trees = trees or []
        in_trees = {i for tree in trees for i in (tree.anchor, *(m for m, _ in tree.members))}
        alone = np.array([i for i in others if i not in in_trees], dtype=np.int64)

        def run_batch(batch: np.ndarray) -> None:
            ids, mask = left_pad([token_ids[i] for i in batch], self.pad_id)
            on_prefill(batch, ids, mask, self.run_chunked(ids, mask, None, cache=cache))

        if len(alone):
            lengths = prompts.lengths[alone]
            self.run_batches(
                [alone[part] for part in plan_batches(lengths, self.batch_policy)], run_batch, tokens
            )
        call = PrefillCall(self, token_ids, on_prefill, tokens, cache)
        if trees:
            prefill_trees(call, trees)
        for head, members in groups.items():
            prefill_on_head(call, members, len(head), keys)
