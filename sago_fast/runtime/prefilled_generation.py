"""Greedy generation whose prompt step is a prefill: shared prefixes once, long prompts in chunks.

Generative tasks put long, alike prompts to the model: every prompt of an lm-eval ``generate_until`` task
with few-shot examples starts with the same demonstrations, and on CPU a long prompt step costs less in
chunks (:mod:`sago_fast.runtime.passes`). Here the prompt step is the engine's prefill
(:meth:`~sago_fast.runtime.engine.PrefillEngine.prefill_prompts`: prefix trees and chunked passes, each
prompt's KV cache kept), and each
batch it hands over decodes from its cache (:func:`~sago_fast.runtime.decode.generate_from_cache`), in
parts whose cache plus ``max_new_tokens`` per row fit the batch policy (as
:func:`~sago_fast.runtime.decode.greedy_generate` plans its batches). The generations are those of
the plain decode loop on the same prompts, up to float rounding of the prompt step (within 1e-4 in the
log-probabilities: tested).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sago_fast.runtime.batching import plan_batches, run_with_backoff
from sago_fast.runtime.decode import Generation, GenerationSettings, TokenText, generate_from_cache
from sago_fast.runtime.engine import PrefillEngine, PromptSet
from sago_fast.runtime.passes import TokenCounts
from sago_fast.runtime.prefill.shared_prefix import PrefixTree


def generate_from_prefill(
    engine: PrefillEngine,
    token_ids: Sequence[Sequence[int]],
    settings: GenerationSettings,
    text: TokenText,
    trees: Sequence[PrefixTree],
    on_prefill: Callable[..., None] | None,
    tokens: TokenCounts,
) -> list[Generation]:
    """Greedy continuations of ``token_ids`` (in order) on ``engine`` (a graph with a KV cache), the
    prompts prefilled along ``trees``. ``on_prefill(batch, ids, mask, outputs, new_tokens)`` hears of
    every prefilled batch first (it counts the tokens; without it they are counted here)."""
    results: list[Generation | None] = [None] * len(token_ids)

    def on_prompts(
        batch: np.ndarray,
        ids: np.ndarray,
        mask: np.ndarray,
        out: dict[str, Any],
        new_tokens: int | None = None,
    ) -> None:
        if on_prefill is not None:
            on_prefill(batch, ids, mask, out, new_tokens)
        else:
            tokens["prefill"] += int(mask.sum()) if new_tokens is None else new_tokens
        cache = engine.kv_cache(out)

        def decode(part: np.ndarray) -> None:
            rows: slice | np.ndarray = slice(None) if len(part) == len(batch) else part  # all: no copy
            done = generate_from_cache(
                engine.session,
                settings,
                text,
                mask[rows],
                out["next_logprobs"][rows],
                cache.rows(rows),
                engine.io_binding_device,
            )
            for i, generation in zip(batch[rows], done, strict=True):
                results[i] = generation

        widths = np.full(len(batch), mask.shape[1] + settings.max_new_tokens, dtype=np.int64)
        for part in plan_batches(widths, engine.batch_policy):
            run_with_backoff(decode, np.sort(part), engine.shrink_batches)

    lengths = np.array([len(ids) + settings.max_new_tokens for ids in token_ids], dtype=np.int64)
    engine.prefill_prompts(PromptSet(token_ids, lengths, trees=trees), on_prompts, tokens, cache=True)
    return results  # type: ignore[return-value]
