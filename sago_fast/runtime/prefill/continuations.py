"""Continuations scored on top of a prompt's KV cache: the prompt is processed once for all its options.

A continuation's first token is read from the prefill's next-token distribution. The rest:

**Option blocks** (:func:`score_in_blocks`, graphs with ``segment_ids``): the continuations of prompt i are
concatenated into one row, segment 1, 2, ... each, and the whole prefilled batch continues its own cache
(``present.*`` fed back as the past as it is: contiguous row ranges, no copy) in one pass. Each
continuation sees the prompt and itself only, at the positions it would have alone, so the pass costs
the continuations' tokens, once per prompt, not a copy of the prompt's cache per continuation. A
continuation's last token predicts nothing and is left out: k tokens cost k - 1.

**One row per continuation** (:func:`score_on_prefix`, graphs without them: ALiBi or sliding-window
models). After a prefill of left-padded prompts (``present.*``: (batch, kv_heads, P, head_dim)),
continuation c of prompt i is scored as one row of a *block* pass: the cache of prompt i without its last
column, then the block ``[last prompt token] + c`` left-padded to the longest block, with ``target_ids``
= the block without its first token. The hole between the cached prefix and the padded block is masked
out, and positions come from the mask, so every row sees exactly ``prompt + c`` (the same numbers as
scoring the whole sequence).

Rows are grouped under the batch policy counting cached + block tokens, so the repeated cache rows of a
group stay within the token budget, and a group's block logits ((rows, block, vocab) float32 and the
log-softmax's temporaries) within LOGITS_BYTES: with a 128k vocabulary the runtime's arena otherwise grows
to ~1.5 GB for option blocks alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sago_fast.runtime.batching import CPU_CALL_OVERHEAD, BatchPolicy, left_pad, plan_batches
from sago_fast.runtime.decode import SEGMENT_IDS, past_input_names
from sago_fast.runtime.kv_cache import KVCache
from sago_fast.runtime.passes import Passes

Run = Callable[[dict[str, Any]], dict[str, Any]]
LOGITS_BYTES = 256 << 20  # one block pass's logits and their log-softmax temporaries (3 float32 copies)


def _within_logits_budget(
    groups: Sequence[np.ndarray],
    rows: Sequence[tuple[int, int]],
    continuations: Sequence[Sequence[Sequence[int]]],
    vocab: int,
) -> list[np.ndarray]:
    """``groups`` split, in order, so that no group's block logits exceed LOGITS_BYTES."""
    out = []
    for group in groups:
        block = 1 + max(len(continuations[rows[g][0]][rows[g][1]]) for g in group)
        most = max(1, LOGITS_BYTES // (block * vocab * 4 * 3))
        out += [group[i : i + most] for i in range(0, len(group), most)]
    return out


def _block_groups(widths: np.ndarray, active: np.ndarray, vocab: int) -> list[slice | np.ndarray]:
    """The block rows ``active`` in passes of similar width: each pass's logits within LOGITS_BYTES, the
    padding plus :data:`~sago_fast.runtime.batching.CPU_CALL_OVERHEAD` per pass the least
    (:func:`plan_batches`). A pass of consecutive rows is a slice (the cache is fed as it is, no copy); any
    other gathers its cache rows."""
    budget = max(1, LOGITS_BYTES // (vocab * 4 * 3))  # block tokens (rows x width) one pass may hold
    policy = BatchPolicy(token_budget=budget, max_batch=len(active), call_overhead=CPU_CALL_OVERHEAD)
    groups: list[slice | np.ndarray] = []
    for part in plan_batches(widths[active] + 1, policy):  # + 1: the closing pad
        rows = np.sort(active[part])
        consecutive = rows[-1] - rows[0] + 1 == len(rows)
        groups.append(slice(int(rows[0]), int(rows[-1]) + 1) if consecutive else rows)
    return groups


@dataclass
class ScoredContinuations:
    """The continuations of a batch of prompts, scored.

    logprobs[r][j]: (len,) float64 log-probs of the tokens of continuation j of prompt r; greedy[r][j]:
    whether each of its tokens is the first arg-max after what precedes it (lm-eval's ``is_greedy``: greedy
    decoding would produce it); tokens: what the passes on the prompts' caches processed (padding
    excluded).
    """

    logprobs: list[list[np.ndarray]]
    greedy: list[list[bool]]
    tokens: int = 0


def first_tokens(
    next_logprobs: np.ndarray, continuations: Sequence[Sequence[Sequence[int]]]
) -> ScoredContinuations:
    """Each continuation's first token after its prompt, with no pass on the cache: a one-token
    continuation's whole score ((1,) log-probs; (0,) for an empty one). next_logprobs: (b, vocab);
    continuations[r]: token lists continuing prompt r."""
    best = np.argmax(next_logprobs, axis=1)  # (b,) the first maximum, as greedy decoding picks
    return ScoredContinuations(
        [
            [np.array([next_logprobs[r, c[0]]], dtype=np.float64) if c else np.empty(0) for c in conts]
            for r, conts in enumerate(continuations)
        ],
        [[not c or int(c[0]) == int(best[r]) for c in conts] for r, conts in enumerate(continuations)],
    )


def score_on_prefix(
    passes: Passes,
    presents: dict[str, np.ndarray],
    prompt_ids: np.ndarray,
    mask: np.ndarray,
    next_logprobs: np.ndarray,
    continuations: Sequence[Sequence[Sequence[int]]],
) -> ScoredContinuations:
    """Every continuation of every prompt of one prefilled batch, scored.

    presents: present.* of the prefill (name -> (b, kv_heads, P, head_dim)); prompt_ids, mask: (b, P) the
    left-padded prompts; next_logprobs: (b, vocab); continuations[r]: token lists continuing prompt r.
    """
    out = first_tokens(next_logprobs, continuations)  # longer ones are scored whole below
    # (prompt row, continuation index) scored by a block pass
    rows = [(r, j) for r, conts in enumerate(continuations) for j, cont in enumerate(conts) if len(cont) > 1]
    if not rows:
        return out
    prefix = mask.shape[1] - 1
    costs = np.array([prefix + len(continuations[r][j]) + 1 for r, j in rows], dtype=np.int64)
    past_names = dict(zip(presents, past_input_names(list(presents)), strict=True))
    vocab = next_logprobs.shape[1]
    run, pad_id = passes.run, passes.pad_id
    for group in _within_logits_budget(plan_batches(costs, passes.batch_policy), rows, continuations, vocab):
        picked = [rows[g] for g in group]
        owners = np.array([r for r, _ in picked])
        blocks = [[int(prompt_ids[r, -1]), *continuations[r][j]] for r, j in picked]
        block_ids, block_mask = left_pad(blocks, pad_id)  # (g, 1 + Kmax)
        feeds = {
            "input_ids": block_ids,
            "attention_mask": np.concatenate([mask[owners, :-1], block_mask], axis=1),
            "target_ids": np.ascontiguousarray(block_ids[:, 1:]),
        }
        for name, value in presents.items():
            feeds[past_names[name]] = np.ascontiguousarray(value[owners, :, :-1])
        result = run(feeds)
        logp, best = result["target_logprobs"], result["target_best"]  # (g, Kmax) each
        for row, (r, j) in enumerate(picked):
            cont = continuations[r][j]
            k = len(cont)
            out.logprobs[r][j] = logp[row, logp.shape[1] - k :].astype(np.float64)
            out.greedy[r][j] = best[row, best.shape[1] - k :].tolist() == list(cont)
        out.tokens += int(block_mask.sum())
    return out


def score_in_blocks(
    passes: Passes,
    cache: KVCache,
    mask: np.ndarray,
    next_logprobs: np.ndarray,
    continuations: Sequence[Sequence[Sequence[int]]],
) -> ScoredContinuations:
    """:func:`score_on_prefix` in option blocks: one row per prompt, its continuations after its cache.

    cache: present.* of the prefill ((b, kv_heads, P, head_dim) each, on the host or the device), fed back
    unchanged (contiguous row ranges; on the device the whole batch, or its rows gathered there); mask:
    (b, P); next_logprobs: (b, vocab); continuations[r]: token lists continuing prompt r.
    """
    out = first_tokens(next_logprobs, continuations)
    # row r: every continuation longer than one token without its last token (it predicts nothing),
    # back to back, segment k + 1 for the k-th of them; each position's target is its continuation's next
    # token. One masked pad column closes every row: T = new - 1 targets then cover every real position.
    inputs: list[list[int]] = []
    targets: list[list[int]] = []
    segments: list[list[int]] = []
    starts: list[list[tuple[int, int]]] = []  # per row: (continuation index, offset in the row's block)
    for conts in continuations:
        inputs_r: list[int] = []
        targets_r: list[int] = []
        segments_r: list[int] = []
        starts_r: list[tuple[int, int]] = []
        for j, cont in enumerate(conts):
            if len(cont) > 1:
                starts_r.append((j, len(inputs_r)))
                segments_r += [len(starts_r)] * (len(cont) - 1)
                inputs_r += cont[:-1]
                targets_r += cont[1:]
        inputs.append(inputs_r)
        targets.append(targets_r)
        segments.append(segments_r)
        starts.append(starts_r)
    widths = np.array([len(b) for b in inputs], dtype=np.int64)
    active = np.flatnonzero(widths)
    if not len(active):
        return out
    pad_id = passes.pad_id
    for rows in _block_groups(widths, active, next_logprobs.shape[1]):
        group = list(range(len(inputs)))[rows] if isinstance(rows, slice) else rows.tolist()
        closed = [[*inputs[r], pad_id] for r in group]
        block_ids, block_mask = left_pad(closed, pad_id)  # (g, W + 1)
        block_mask[:, -1] = 0  # the closing pad
        block_targets, _ = left_pad([targets[r] for r in group], pad_id)  # (g, W): target of position t
        block_segments, _ = left_pad([[*segments[r], 0] for r in group], 0)  # padding: segment 0, masked
        feeds = {
            "input_ids": block_ids,
            "attention_mask": np.concatenate([mask[rows], block_mask], axis=1),
            SEGMENT_IDS: np.concatenate([np.zeros_like(mask[rows]), block_segments], axis=1),
            "target_ids": block_targets,
            **cache.rows(rows),
        }
        result = passes.run(feeds)
        logp, best = result["target_logprobs"], result["target_best"]  # (g, W) each
        pad = block_targets.shape[1] - widths[group]
        for row, r in enumerate(group):
            for j, offset in starts[r]:
                cont = continuations[r][j]
                at = pad[row] + offset  # the continuation's first position: it predicts its second token
                predicted = logp[row, at : at + len(cont) - 1]
                out.logprobs[r][j] = np.concatenate([out.logprobs[r][j], predicted.astype(np.float64)])
                rest = best[row, at : at + len(cont) - 1].tolist() == list(cont[1:])
                out.greedy[r][j] = out.greedy[r][j] and rest
        out.tokens += int(block_mask.sum())
    return out
