"""Greedy decoding over the model graph (``model.onnx``): batched, KV cache kept between steps.

The first step is the prompts' prefill (its outputs can be handed to ``on_prefill``: pooled hidden
states, next-token distribution, KV cache); every later step feeds the new tokens, the grown attention
mask and the previous step's ``present.*`` tensors back as ``past_key_values.*``. A row
stops at an end-of-sequence token, when its decoded text contains a stop string, or after
``max_new_tokens``; finished rows leave the batch (their cache rows are dropped), so a long answer does
not make the short ones pay for it. :func:`generate_from_cache` starts the same loop from a prompt step
run elsewhere (its cache and next-token distribution; see :mod:`sago_fast.runtime.prefilled_generation`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from sago_fast import defaults
from sago_fast.errors import InputError
from sago_fast.runtime.batching import BatchPolicy, left_pad, plan_batches, run_with_backoff
from sago_fast.runtime.progress import PassProgress

SEGMENT_IDS = "segment_ids"  # graph input of option blocks (see sago_fast.exporters.unified)


@dataclass(frozen=True)
class GenerationSettings:
    """Greedy decoding limits.

    max_new_tokens: tokens generated at most per prompt.
    stop: strings that end a generation; the returned text is cut before the first one (the tokens that
        produced it are kept in ``token_ids``).
    stop_at_eos: end at the model's end-of-sequence token(s) (kept in ``token_ids``, not in ``text``).
    """

    max_new_tokens: int = defaults.MAX_NEW_TOKENS
    stop: tuple[str, ...] = defaults.STOP
    stop_at_eos: bool = True

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise InputError("max_new_tokens must be at least 1")
        if any(not s for s in self.stop):
            raise InputError("stop strings must be non-empty")


@dataclass(frozen=True)
class Generation:
    """One prompt's greedy continuation.

    token_ids: generated ids (eos / stop-string tokens included); logprobs: log P of each, same length;
    text: decoded continuation cut before the first stop string; stop_reason: "eos", "stop" or "length".
    """

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    stop_reason: str

    @property
    def logprob(self) -> float:
        """Log-probability of the whole generated sequence under greedy decoding."""
        return float(sum(self.logprobs))


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """``text`` cut before the earliest stop string, and whether one was found."""
    cuts = [i for i in (text.find(s) for s in stop) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


@dataclass
class _Row:
    tokens: list[int]
    logprobs: list[float]
    text: str = ""
    reason: str = "length"

    def generation(self) -> Generation:
        return Generation(tuple(self.tokens), tuple(self.logprobs), self.text, self.reason)


@dataclass(frozen=True)
class TokenText:
    """How generated ids become text: the pad id fed to finished or short rows, the end-of-sequence ids
    (empty: decoding does not stop at them) and the tokenizer's decode."""

    pad_id: int
    eos: frozenset[int]
    decode: Callable[[list[int]], str]


PrefillHook = Callable[[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]], None]


def takes_segments(session: object) -> bool:
    """Whether the graph has the ``segment_ids`` input (option blocks; see :mod:`sago_fast.exporters.unified`)."""
    return any(spec.name == SEGMENT_IDS for spec in session.get_inputs())  # type: ignore[attr-defined]


def with_plain_segments(session: object, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``feeds`` plus all-zero ``segment_ids`` (every token sees what a causal model sees) when the graph
    takes them."""
    if takes_segments(session):
        feeds[SEGMENT_IDS] = np.zeros_like(feeds["attention_mask"])
    return feeds


def continue_feeds(
    session: object, ids: np.ndarray, mask: np.ndarray, past: dict[str, Any]
) -> dict[str, Any]:
    """Feeds of a pass that continues a KV cache: new tokens ``ids`` (batch, new), ``mask`` over past and
    new (batch, past + new), the past tensors by input name, no targets."""
    feeds = {"input_ids": ids, "attention_mask": mask, "target_ids": np.zeros((len(ids), 0), dtype=np.int64)}
    with_plain_segments(session, feeds)
    feeds.update(past)
    return feeds


def prefill_feeds(session: object, ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """Feeds of a prompt step: zero-length past tensors (batch, kv_heads, 0, head_dim), no targets."""
    feeds = {"input_ids": ids, "attention_mask": mask, "target_ids": np.zeros((len(ids), 0), dtype=np.int64)}
    with_plain_segments(session, feeds)
    for spec in session.get_inputs():  # type: ignore[attr-defined]
        if spec.name.startswith("past_key_values."):
            heads, head_dim = int(spec.shape[1]), int(spec.shape[3])
            dtype = np.float16 if "float16" in spec.type else np.float32
            feeds[spec.name] = np.zeros((len(ids), heads, 0, head_dim), dtype=dtype)
    return feeds


def _present_names(session: object) -> list[str]:
    return [o.name for o in session.get_outputs() if o.name.startswith("present.")]  # type: ignore[attr-defined]


class DecodeRunner(Protocol):
    """What the decode loop needs of the engine's passes (:class:`~sago_fast.runtime.passes.Passes`)."""

    session: Any
    batch_policy: BatchPolicy
    progress: PassProgress

    @property
    def io_binding_device(self) -> str | None: ...

    def shrink_batches(self, failed_size: int) -> None: ...


def greedy_generate(
    runner: DecodeRunner,
    token_ids: Sequence[Sequence[int]],
    settings: GenerationSettings,
    text: TokenText,
    on_prefill: PrefillHook | None = None,
) -> list[Generation]:
    """Greedy continuations of already tokenised prompts, in input order.

    Prompts are length-bucketed under ``runner.batch_policy`` counting prompt + ``max_new_tokens`` per
    row; within a batch, rows are left-padded (position ids come from the mask inside the graph), so each
    row generates what its prompt generates alone. With IOBinding (``runner.io_binding_device``) the KV
    cache stays in ORT-owned device memory between steps (only the chosen token ids are copied to the
    host); a batch that runs out of device memory is generated as two halves (``runner.shrink_batches``
    hears of the failed size). ``runner.progress`` hears (prompts done, tokens processed) after every
    batch; ``on_prefill(batch, ids, mask, outputs)`` gets every output of each batch's prompt step (host
    arrays), before decoding goes on from its cache.
    """
    lengths = np.array([len(ids) + settings.max_new_tokens for ids in token_ids], dtype=np.int64)
    results: list[Generation | None] = [None] * len(token_ids)
    loop = _DecodeLoop.of(runner.session, settings, text)
    device = runner.io_binding_device
    generate_batch = loop.plain if device is None else functools.partial(loop.bound, device=device)

    def run_batch(batch: np.ndarray) -> None:
        hook = None if on_prefill is None else functools.partial(on_prefill, batch)
        rows = generate_batch([token_ids[i] for i in batch], hook)
        for i, row in zip(batch, rows, strict=True):
            results[i] = row.generation()

    for batch in plan_batches(lengths, runner.batch_policy):
        run_with_backoff(run_batch, batch, runner.shrink_batches)
        tokens = sum(len(token_ids[i]) + len(results[i].token_ids) for i in batch)  # type: ignore[union-attr]
        runner.progress.advance(len(batch), tokens)
    return results  # type: ignore[return-value]


BatchPrefillHook = Callable[[np.ndarray, np.ndarray, dict[str, np.ndarray]], None]


@dataclass(frozen=True)
class _DecodeLoop:
    """Greedy decoding of one batch of prompts on ``session``: :meth:`plain` (numpy feeds) or
    :meth:`bound` (IOBinding)."""

    session: Any
    settings: GenerationSettings
    text: TokenText

    @classmethod
    def of(cls, session: Any, settings: GenerationSettings, text: TokenText) -> _DecodeLoop:
        """The loop for ``settings``: end-of-sequence ids dropped from ``text`` when it does not stop there."""
        return cls(session, settings, text if settings.stop_at_eos else replace(text, eos=frozenset()))

    def plain(self, prompts: list[Sequence[int]], on_prefill: BatchPrefillHook | None) -> list[_Row]:
        return _generate_batch(self, prompts, on_prefill)

    def bound(
        self, prompts: list[Sequence[int]], on_prefill: BatchPrefillHook | None, device: str
    ) -> list[_Row]:
        return _generate_batch_bound(self, prompts, on_prefill, device)


def _generate_batch(
    loop: _DecodeLoop, prompts: list[Sequence[int]], on_prefill: BatchPrefillHook | None
) -> list[_Row]:
    session = loop.session
    ids, mask = left_pad(prompts, loop.text.pad_id)  # (B, T) each
    names = [o.name for o in session.get_outputs()]  # type: ignore[attr-defined]
    outputs = dict(zip(names, session.run(None, prefill_feeds(session, ids, mask)), strict=True))
    if on_prefill is not None:
        on_prefill(ids, mask, outputs)
    present_names = _present_names(session)
    past = dict(zip(past_input_names(present_names), (outputs[n] for n in present_names), strict=True))
    return _decode(loop, mask, outputs["next_tokens"], outputs["next_logprob"], past)


def generate_from_cache(
    session: object,
    settings: GenerationSettings,
    text: TokenText,
    mask: np.ndarray,
    next_logprobs: np.ndarray,
    past: dict[str, Any],
    device: str | None = None,
) -> list[Generation]:
    """Greedy continuations of a batch whose prompt step ran elsewhere (a chunked or prefix-tree prefill):
    ``mask`` (B, P) over its cache, ``next_logprobs`` (B, vocab) after the prompts, ``past`` the cache by
    input name (host arrays, or ONNX Runtime values on ``device``, the IOBinding loop's). The first token
    is the first arg-max, as the graph's ``next_tokens`` picks it."""
    loop = _DecodeLoop.of(session, settings, text)
    first = next_logprobs.argmax(axis=1)  # (B,)
    logprob = np.take_along_axis(next_logprobs, first[:, None], axis=1)[:, 0]
    return [row.generation() for row in _decode_from(loop, mask, first, logprob, past, device)]


def _decode_from(
    loop: _DecodeLoop,
    mask: np.ndarray,
    next_tokens: np.ndarray,
    next_logprob: np.ndarray,
    past: dict[str, Any],
    device: str | None,
) -> list[_Row]:
    """Decoding after a prompt step: the plain loop (``device`` None) or the IOBinding loop on ``device``,
    ``past`` (by input name) moved there where it is on the host."""
    if device is None:
        return _decode(loop, mask, next_tokens, next_logprob, past)
    import onnxruntime as ort

    values = [
        v if not isinstance(v, np.ndarray) else ort.OrtValue.ortvalue_from_numpy(v, device, 0)
        for v in (past[name] for name in past_input_names(_present_names(loop.session)))
    ]
    return _decode_bound(loop, None, mask, values, device, first=(next_tokens, next_logprob))


def _decode(
    loop: _DecodeLoop,
    mask: np.ndarray,
    next_tokens: np.ndarray,
    next_logprob: np.ndarray,
    past: dict[str, Any],
) -> list[_Row]:
    """Decoding from the prompt step's outputs: ``next_tokens`` / ``next_logprob`` (B,) its greedy token,
    ``past`` (by input name) its cache over ``mask`` (B, P)."""
    session, settings, text = loop.session, loop.settings, loop.text
    rows = [_Row([], []) for _ in range(len(mask))]
    active = np.arange(len(mask))  # batch row -> prompt index, for rows still generating
    names = [o.name for o in session.get_outputs()]  # type: ignore[attr-defined]
    present_names = _present_names(session)
    past_names = past_input_names(present_names)
    for step in range(settings.max_new_tokens):
        if step:
            feeds = continue_feeds(session, next_tokens.reshape(-1, 1).astype(np.int64), mask, past)
            outputs = dict(zip(names, session.run(None, feeds), strict=True))  # type: ignore[attr-defined]
            next_tokens, next_logprob = outputs["next_tokens"], outputs["next_logprob"]  # (b,), (b,)
            past = dict(zip(past_names, (outputs[n] for n in present_names), strict=True))
        keep = _record_step(rows, active, next_tokens, next_logprob, settings, text)
        if not keep.any():
            break
        mask = np.concatenate([mask, np.ones((len(active), 1), dtype=np.int64)], axis=1)
        if not keep.all():
            active, mask, next_tokens = active[keep], mask[keep], next_tokens[keep]
            past = {name: value[keep] for name, value in past.items()}
    _finish(rows, settings, text.decode)
    return rows


def past_input_names(present_names: list[str]) -> list[str]:
    """The inputs ``present.*`` outputs are fed back to (``past_key_values.*``), in the same order."""
    return [name.replace("present.", "past_key_values.", 1) for name in present_names]


def _record_step(
    rows: list[_Row],
    active: np.ndarray,
    next_tokens: np.ndarray,
    next_logprob: np.ndarray,
    settings: GenerationSettings,
    text: TokenText,
) -> np.ndarray:
    """Append each active row's token; returns which active rows go on generating."""
    keep = np.ones(len(active), dtype=bool)
    for b, index in enumerate(active):
        row = rows[index]
        if row.reason != "length":  # finished earlier (IOBinding keeps finished rows in the batch)
            keep[b] = False
            continue
        token = int(next_tokens[b])
        row.tokens.append(token)
        row.logprobs.append(float(next_logprob[b]))
        if token in text.eos:
            row.reason, keep[b] = "eos", False
        elif settings.stop:  # decoded every step only when there are stop strings to look for
            row.text, stopped = cut_at_stop(text.decode(row.tokens), settings.stop)
            if stopped:
                row.reason, keep[b] = "stop", False
    return keep


def _finish(rows: list[_Row], settings: GenerationSettings, decode: Callable[[list[int]], str]) -> None:
    for row in rows:
        if row.reason == "eos":
            row.text = decode(row.tokens[:-1])
        elif row.reason == "length" and not settings.stop:
            row.text = decode(row.tokens)


def _generate_batch_bound(
    loop: _DecodeLoop, prompts: list[Sequence[int]], on_prefill: BatchPrefillHook | None, device: str
) -> list[_Row]:
    """:func:`_generate_batch` with IOBinding: ``present.*`` outputs stay in ORT memory on ``device`` and
    are bound as the next step's ``past_key_values.*``; only next_tokens / next_logprob (batch,) are
    copied to the host. Finished rows stay in the batch (fed the pad token, their outputs ignored): the
    cache is never copied out to drop them. The prompt step runs with host outputs when ``on_prefill``
    wants them (its cache is then copied to ``device`` once)."""
    import onnxruntime as ort

    session = loop.session
    ids, mask = left_pad(prompts, loop.text.pad_id)  # (B, T) each
    present_names = _present_names(session)
    past_names = past_input_names(present_names)
    first = prefill_feeds(session, ids, mask)
    if on_prefill is None:  # the prompt step bound like every other step
        empty = [ort.OrtValue.ortvalue_from_numpy(first[name], device, 0) for name in past_names]
        return _decode_bound(loop, ids, mask, empty, device)
    outputs = [o.name for o in session.get_outputs()]  # type: ignore[attr-defined]
    host = dict(zip(outputs, session.run(None, first), strict=True))  # type: ignore[attr-defined]
    on_prefill(ids, mask, host)
    past = dict(zip(past_names, (host[name] for name in present_names), strict=True))
    return _decode_from(loop, mask, host["next_tokens"], host["next_logprob"], past, device)


def _decode_bound(
    loop: _DecodeLoop,
    ids: np.ndarray | None,
    mask: np.ndarray,
    past: list[Any],
    device: str,
    first: tuple[np.ndarray, np.ndarray] | None = None,
) -> list[_Row]:
    """The IOBinding decode loop. Without ``first``: its first step is the prompt step, ``ids`` (B, T) on
    the empty ``past``. With ``first`` (the prompt step's greedy tokens and their log-probs, (B,) each):
    ``past`` (ONNX Runtime values, in ``past_key_values.*`` order) is the prompts' cache over ``mask``."""
    session, settings, text = loop.session, loop.settings, loop.text
    batch = len(mask)
    rows = [_Row([], []) for _ in range(batch)]
    active = np.arange(batch)
    outputs = [o.name for o in session.get_outputs()]  # type: ignore[attr-defined]
    present_names = _present_names(session)
    past_names = past_input_names(present_names)
    no_targets = np.zeros((batch, 0), dtype=np.int64)
    segments = takes_segments(session)
    for step in range(settings.max_new_tokens):
        if step == 0 and first is not None:
            (next_tokens, next_logprob), new_past = first, past
        else:
            binding = session.io_binding()  # type: ignore[attr-defined]
            binding.bind_cpu_input("input_ids", np.ascontiguousarray(ids))
            binding.bind_cpu_input("attention_mask", np.ascontiguousarray(mask))
            binding.bind_cpu_input("target_ids", no_targets)
            if segments:
                binding.bind_cpu_input(SEGMENT_IDS, np.zeros_like(mask))
            for name, value in zip(past_names, past, strict=True):
                binding.bind_ortvalue_input(name, value)
            for name in outputs:
                binding.bind_output(name, "cpu" if name in ("next_tokens", "next_logprob") else device, 0)
            session.run_with_iobinding(binding)  # type: ignore[attr-defined]
            values = dict(zip(outputs, binding.get_outputs(), strict=True))
            next_tokens = values["next_tokens"].numpy()  # (B,) on the host
            next_logprob = values["next_logprob"].numpy()
            new_past = [values[name] for name in present_names]
        _record_step(rows, active, next_tokens, next_logprob, settings, text)
        if all(row.reason != "length" for row in rows):
            break
        past = new_past
        finished = np.array([row.reason != "length" for row in rows])
        ids = np.where(finished, text.pad_id, next_tokens).reshape(-1, 1).astype(np.int64)
        mask = np.concatenate([mask, np.ones((batch, 1), dtype=np.int64)], axis=1)
    _finish(rows, settings, text.decode)
    return rows
