"""Chunked passes: the new columns of a long pass run as a few narrower passes, each continuing the last's
KV cache.

On CPU a pass costs less per token in narrower pieces: the attention scores (batch x heads x new x
past + new) and the wide intermediate activations shrink with the width, and a causal piece computes only
the scores of the columns before it. Measured on the 2-core development machine (SmolLM2-135M fp32,
~4,070 tokens a pass, medians of 3): 37 x 110 tokens 3.75 s whole, 3.49 s in 2 chunks; 15 x 264 4.10 s,
3.59 s in 4; 7 x 528 4.34 s, 3.47 s in 4; 3 x 1,056 4.90 s, 3.20 s in 8. Every chunk is one more pass
(~30-50 ms on this CPU before its first token), so ``chunk`` (the largest width run whole,
:attr:`~sago_fast.runtime.model.SagoModel.prefill_chunk`) is kept near 100 columns, and off on CUDA.

A pass over ``W`` new columns is cut into ``ceil(W / chunk)`` pieces of equal width (the last takes the
remainder). Left padding stays where it is: a row whose piece holds only padding sees only itself there
(the graph's rule) and adds nothing to its mean. The outputs are those of the whole pass: the last
token's hidden state and next-token distribution from the last piece, the masked mean over the new tokens
combined from the pieces' (token-weighted), and the KV cache of the last piece, which covers every column.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sago_fast.runtime.generate import continue_feeds, prefill_feeds

CPU_PREFILL_CHUNK = 128  # the default chunk on CPU (load_model); CUDA runs passes whole


def chunk_widths(width: int, chunk: int) -> list[int]:
    """Widths of the pieces of a pass over ``width`` new columns: one piece when ``chunk`` is 0 or the
    pass is no wider, else ``ceil(width / chunk)`` pieces as equal as may be."""
    if chunk <= 0 or width <= chunk:
        return [width]
    pieces = math.ceil(width / chunk)
    base, extra = divmod(width, pieces)
    return [base + (1 if i < extra else 0) for i in range(pieces)]


def _feeds(session: Any, ids: np.ndarray, mask: np.ndarray, past: dict[str, Any] | None) -> dict[str, Any]:
    """A prefill's feeds (``past`` None) or those of a pass continuing ``past``."""
    return prefill_feeds(session, ids, mask) if past is None else continue_feeds(session, ids, mask, past)


def run_chunked(
    model: Any,
    ids: np.ndarray,
    mask: np.ndarray,
    past: dict[str, Any] | None,
    *,
    cache: bool,
    chunk: int,
) -> dict[str, Any]:
    """The outputs of one pass of ``ids`` (rows, W) over ``past`` (None: a prefill), run in pieces of at
    most ``chunk`` columns (:func:`chunk_widths`). mask: (rows, P + W) over past and new columns.

    Returns ``hidden_last``, ``hidden_mean``, ``next_logprobs`` and, when ``cache``, the ``present.*``
    tensors of all P + W columns, as ``model._run`` returns them for the whole pass."""
    widths = chunk_widths(ids.shape[1], chunk if model.has_kv_cache else 0)  # no cache: no pieces
    if len(widths) == 1:
        return model._run(_feeds(model.session, ids, mask, past), cache=cache)
    done = mask.shape[1] - ids.shape[1]  # columns before this piece (the past's, then earlier pieces')
    start = 0
    sums: np.ndarray | None = None  # (layers, rows, d) token-weighted sum of the pieces' means
    counts = np.zeros(len(ids), dtype=np.int64)  # (rows,) real new tokens so far
    out: dict[str, Any] = {}
    for piece, width in enumerate(widths):
        piece_mask = mask[:, : done + width]
        last = piece == len(widths) - 1
        feeds = _feeds(model.session, ids[:, start : start + width], piece_mask, past)
        out = model._run(feeds, cache=cache or not last)
        real = piece_mask[:, done:].sum(1)  # (rows,)
        weighted = out["hidden_mean"].astype(np.float64) * real[None, :, None]
        sums = weighted if sums is None else sums + weighted
        counts += real
        if not last:
            past = model._kv_cache(out).rows(slice(None))  # every row: fed back without a copy
        start += width
        done += width
    assert sums is not None
    out["hidden_mean"] = (sums / np.maximum(counts, 1)[None, :, None]).astype(np.float32)
    return out
