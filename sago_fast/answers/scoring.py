"""Option log-likelihoods with lm-evaluation-harness conventions, through the scoring graph.

loglik(context, continuation) = sum of log P(token | prefix) over the continuation's tokens, where context
and continuation are encoded together and the continuation tokens are those after the context's own
token count; trailing whitespace of the context moves to the front of the continuation.

``score_pairs`` scores continuations of known prompts on each prompt's prefill cache (one pass over the
prompt for all its continuations); a pair whose context does not encode to exactly the prompt's tokens
is scored as a whole sequence. A prompt longer than the model is cut from the left, as lm-eval does
(:func:`fit_to_context`), and the probe says by how many tokens. ``score_continuations`` scores arbitrary
pairs as whole sequences. Only the log-probs of each row's target tokens leave the graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from sago_fast.errors import InputError

if TYPE_CHECKING:
    from sago_fast.answers.prompting import ModelPrompts
    from sago_fast.answers.protocol import LanguageModel
    from sago_fast.runtime.decode import GenerationSettings
    from sago_fast.runtime.model import Prefill


@dataclass(frozen=True)
class ContinuationScores:
    loglik: np.ndarray  # (n,) float64: summed log-probs of each continuation
    n_tokens: np.ndarray  # (n,) int64: continuation length in tokens
    n_chars: np.ndarray  # (n,) int64: continuation length in characters, delimiter included


def split_context(context: str, continuation: str) -> tuple[str, str]:
    """Move the context's trailing whitespace to the continuation (lm-eval convention)."""
    stripped = context.rstrip()
    return stripped, context[len(stripped) :] + continuation


def encode_pair(
    tokenizer: Any,
    context: str,
    continuation: str,
    context_lengths: dict[str, int] | None = None,
    move_whitespace: bool = True,
    add_special_tokens: bool = True,
) -> tuple[list[int], list[int]]:
    """(context ids, continuation ids) split at the context's own token count.

    context_lengths: optional memo of token counts per (stripped) context, so a prompt scored with
    several options is tokenised alone only once. move_whitespace: lm-eval's rule (trailing whitespace of
    the context moves to the continuation); off after a chat template's assistant header.
    add_special_tokens: off for chat-template text, which carries its own special tokens.
    """
    if move_whitespace:
        context, continuation = split_context(context, continuation)
    whole = tokenizer(context + continuation, add_special_tokens=add_special_tokens)["input_ids"]
    if context_lengths is not None and context in context_lengths:
        n_context = context_lengths[context]
    else:
        n_context = len(tokenizer(context, add_special_tokens=add_special_tokens)["input_ids"])
        if context_lengths is not None:
            context_lengths[context] = n_context
    if n_context == 0:  # empty context: lm-eval uses the BOS (or EOS) token
        start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        return [int(start)], list(whole)
    return list(whole[:n_context]), list(whole[n_context:])


def fit_to_context(
    token_ids: Sequence[Sequence[int]], room: Sequence[int], limit: int | None
) -> tuple[list[list[int]], list[int]]:
    """lm-evaluation-harness's rule for an input longer than the model: cut the prompt from the left.

    Prompt i keeps its last tokens, so that they and the ``room[i]`` positions that follow them (its
    longest continuation but its last token, which is never fed, or the tokens it may generate) fit in
    ``limit`` positions; at least one token is kept. For a continuation of k tokens this keeps the last
    ``limit + 1`` tokens of prompt + continuation, as lm-eval's ``loglikelihood`` does; for generation,
    ``limit - max_new_tokens`` prompt tokens, as its ``generate_until``.
    Returns the prompts as the model reads them and the tokens cut from each (0: whole)."""
    if limit is None:
        return [list(ids) for ids in token_ids], [0] * len(token_ids)
    kept, cut = [], []
    for ids, extra in zip(token_ids, room, strict=True):
        n_cut = max(len(ids) - max(limit - extra, 1), 0)
        kept.append(list(ids[n_cut:]))
        cut.append(n_cut)
    return kept, cut


def score_continuations(
    model: LanguageModel,
    contexts: Sequence[str],
    continuations: Sequence[str],
    move_whitespace: bool = True,
    add_special_tokens: bool = True,
) -> ContinuationScores:
    """Summed continuation log-probs for each (context, continuation) pair, via ``model.target_logprobs``."""
    if len(contexts) != len(continuations):
        raise InputError("contexts and continuations must have the same length")
    sequences: list[list[int]] = []
    n_tokens = np.zeros(len(contexts), dtype=np.int64)
    context_lengths: dict[str, int] = {}
    for i, (context, continuation) in enumerate(zip(contexts, continuations, strict=True)):
        ctx, cont = encode_pair(
            model.tokenizer, context, continuation, context_lengths, move_whitespace, add_special_tokens
        )
        if not cont:
            raise InputError(f"pair {i}: the continuation {continuation!r} encodes to no tokens")
        n_tokens[i] = len(cont)
        sequences.append(ctx + cont)
    limit = model.max_positions
    if limit is not None and max(len(s) for s in sequences) > limit:
        raise InputError(f"a context + continuation is longer than the model's {limit} positions")
    per_token = model.target_logprobs(sequences, n_tokens.tolist())
    loglik = np.array([lp.sum() for lp in per_token], dtype=np.float64)
    n_chars = np.array([len(c) for c in continuations], dtype=np.int64)
    return ContinuationScores(loglik, n_tokens, n_chars)


def score_pairs(
    model: LanguageModel,
    prompts: ModelPrompts,
    prompt_ids: Sequence[Sequence[int]],
    rows: Sequence[int],
    continuations: Sequence[str],
    generation: GenerationSettings | None = None,
) -> tuple[np.ndarray, Prefill]:
    """Summed log-probs of each (prompts.texts[rows[p]], continuations[p]) pair, in one prefill per prompt.

    prompts: what the model reads (its ``keys``: which prompts may share a prefilled prefix, those of
    one example, so that results do not depend on which other examples are prefilled in the same call);
    prompt_ids: its token ids. Returns (loglik (n_pairs,) float64, the model's
    :class:`~sago_fast.runtime.model.Prefill` of the prompts, which carries the probe and, with
    ``generation``, the greedy generations from the same cache; its ``heads``: per prompt, its first tokens
    that prompts of any key may share, see ``SagoModel.prefill``).
    """
    on_cache: list[list[list[int]]] = [[] for _ in prompt_ids]
    slot: list[tuple[int, int]] = []  # pair -> (prompt row, index in on_cache[row]); (-1, k): fallback k
    fallback: list[list[int]] = []
    fallback_targets: list[int] = []
    lengths: dict[str, int] = {}
    for p, (row, continuation) in enumerate(zip(rows, continuations, strict=True)):
        ctx, cont = encode_pair(
            model.tokenizer,
            prompts.texts[row],
            continuation,
            lengths,
            prompts.move_whitespace,
            prompts.add_special_tokens,
        )
        if not cont:
            raise InputError(f"pair {p}: the continuation {continuation!r} encodes to no tokens")
        if list(ctx) == list(prompt_ids[row]):
            slot.append((row, len(on_cache[row])))
            on_cache[row].append(cont)
        else:  # the continuation changes how the prompt's end is tokenised: score the whole sequence
            slot.append((-1, len(fallback)))
            fallback.append(ctx + cont)
            fallback_targets.append(len(cont))
    limit = model.max_positions
    # positions after the prompt: a continuation's last token is never fed (k tokens take k - 1), and
    # generation keeps room for max_new_tokens, both as lm-eval counts them
    room = [max((len(c) - 1 for c in conts), default=0) for conts in on_cache]
    if generation is not None:
        room = [max(r, generation.max_new_tokens) for r in room]
    kept, cut = fit_to_context(prompt_ids, room, limit)
    if limit is not None:
        if any(t >= limit for t in [*room, *fallback_targets]):
            raise InputError(f"an answer or continuation is as long as the model's {limit} positions")
        fallback = [sequence[-limit:] for sequence in fallback]  # lm-eval: the context's left goes
    shared = [0 if c else h for h, c in zip(prompts.heads, cut, strict=True)] if prompts.heads else []
    named = {"heads": shared} if any(shared) and generation is None else {}  # a cut prompt lost its head
    result = model.prefill(kept, on_cache, generation, share_keys=prompts.share_keys, **named)
    if any(cut):
        result = replace(result, probe=replace(result.probe, n_cut=np.array(cut, dtype=np.int64)))
    whole = model.target_logprobs(fallback, fallback_targets) if fallback else []
    loglik = np.array(
        [
            float(result.continuation_logprobs[row][k].sum()) if row >= 0 else float(whole[k].sum())
            for row, k in slot
        ],
        dtype=np.float64,
    )
    return loglik, result
