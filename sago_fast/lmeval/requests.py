"""lm-eval's token-level requests as sago passes: every continuation of one context on one prefill.

lm-eval hands a backend (context tokens, continuation tokens) pairs, one per answer option. sago scores
all continuations of a context on that context's KV cache in one option block
(:meth:`sago_fast.runtime.model.SagoModel.prefill`), so a 4-option item costs one prefill of its
context instead of four. Pairs longer than the model's ``max_length + 1`` tokens are cut from the left
as lm-eval's ``hf`` backend cuts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sago_fast.errors import InputError

DEFAULT_CONTEXTS_PER_PASS = 256  # contexts prefilled per call (bounds the probe arrays it returns)


@dataclass(frozen=True)
class ContextGroup:
    """One context and the pairs that continue it. ``pairs[j]`` is the request index of
    ``continuations[j]``."""

    context: tuple[int, ...]
    continuations: list[list[int]] = field(default_factory=list)
    pairs: list[int] = field(default_factory=list)


def cut_pair(
    context: Sequence[int], continuation: Sequence[int], max_length: int
) -> tuple[list[int], list[int]]:
    """lm-eval ``hf``'s rule: the model reads the last ``max_length + 1`` tokens of context +
    continuation (all but the last token as input); what is cut comes off the context's left."""
    if not continuation:
        raise InputError("a loglikelihood request's continuation encodes to no tokens")
    if len(continuation) > max_length:
        raise InputError(
            f"a continuation of {len(continuation)} tokens does not fit the model's {max_length} positions"
        )
    keep = max_length + 1 - len(continuation)
    return list(context[-keep:] if len(context) > keep else context), list(continuation)


def group_pairs(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], max_length: int) -> list[ContextGroup]:
    """``pairs`` ((context ids, continuation ids) per request) grouped by context after cutting, longest
    context first."""
    groups: dict[tuple[int, ...], ContextGroup] = {}
    for index, (context, continuation) in enumerate(pairs):
        if not context:
            raise InputError(f"request {index}: an empty context (lm-eval gives the prefix token instead)")
        ctx, cont = cut_pair(context, continuation, max_length)
        group = groups.setdefault(tuple(ctx), ContextGroup(tuple(ctx)))
        group.continuations.append(cont)
        group.pairs.append(index)
    return sorted(groups.values(), key=lambda g: -len(g.context))


def passes(
    groups: Sequence[ContextGroup], per_pass: int = DEFAULT_CONTEXTS_PER_PASS
) -> list[list[ContextGroup]]:
    """``groups`` in calls of at most ``per_pass`` contexts, in order (longest first: similar lengths
    batch together)."""
    return [list(groups[start : start + per_pass]) for start in range(0, len(groups), per_pass)]
