"""Graph calls as sago makes them: one pass (its KV cache kept only when asked for, on the device with
IOBinding), a wide pass in chunks, batches run with a back-off on out of memory.

:class:`Passes` is the lower half of the prefill engine (:class:`~sago_fast.runtime.engine.PrefillEngine`
adds the prompts' prefill on top): prefix trees, shared heads and prefilled generation run on it.

**Chunked passes.** On CPU a pass costs less per token in narrower pieces: the attention scores (batch x
heads x new x past + new) and the wide intermediate activations shrink with the width, and a causal piece
computes only the scores of the columns before it. Measured on the 2-core development machine
(SmolLM2-135M fp32, ~4,070 tokens a pass, medians of 3): 37 x 110 tokens 3.75 s whole, 3.49 s in 2 chunks;
15 x 264 4.10 s, 3.59 s in 4; 7 x 528 4.34 s, 3.47 s in 4; 3 x 1,056 4.90 s, 3.20 s in 8. Every chunk is
one more pass (~30-50 ms on this CPU before its first token), so ``prefill_chunk`` (the largest width run
whole) is kept near 100 columns, and off on CUDA. A pass over ``W`` new columns is cut into
``ceil(W / chunk)`` pieces of equal width (the last takes the remainder). Left padding stays where it is:
a row whose piece holds only padding sees only itself there (the graph's rule) and adds nothing to its
mean. The outputs are those of the whole pass: the last token's hidden state and next-token distribution
from the last piece, the masked mean over the new tokens combined from the pieces' (token-weighted), and
the KV cache of the last piece, which covers every column.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from sago_fast.defaults import MIN_SHARED_TOKENS
from sago_fast.runtime.batching import BatchPolicy, run_with_backoff
from sago_fast.runtime.decode import continue_feeds, prefill_feeds
from sago_fast.runtime.kv_cache import DeviceCache, HostCache, KVCache, RowGather, present_names
from sago_fast.runtime.progress import NoProgress, PassProgress
from sago_fast.runtime.session import SessionOptions

log = logging.getLogger(__name__)

CPU_PREFILL_CHUNK = 128  # the default chunk on CPU (load_model); CUDA runs passes whole
Outputs = dict[str, Any]  # a pass's outputs by name: host arrays, the KV cache maybe on the device
TokenCounts = dict[str, int]  # tokens through the graph by kind: "prefill", "blocks"


def chunk_widths(width: int, chunk: int) -> list[int]:
    """Widths of the pieces of a pass over ``width`` new columns: one piece when ``chunk`` is 0 or the
    pass is no wider, else ``ceil(width / chunk)`` pieces as equal as may be."""
    if chunk <= 0 or width <= chunk:
        return [width]
    pieces = math.ceil(width / chunk)
    base, extra = divmod(width, pieces)
    return [base + (1 if i < extra else 0) for i in range(pieces)]


@dataclass
class Passes:
    """One ONNX Runtime session of an exported graph, run as sago runs it.

    batch_policy: how prompts are batched (shrunk after an out-of-memory failure: :meth:`shrink_batches`);
    progress: hears of every batch of every pass; prefix_sharing: prompts sharing this many leading tokens
    prefill them once (0: off; :mod:`sago_fast.runtime.prefill.shared_prefix`); prefill_chunk: passes wider than
    this many new tokens run in chunks (0: whole; module docstring)."""

    session: Any
    device: str  # "cpu" or "cuda" (resolved)
    pad_id: int
    has_kv_cache: bool
    batch_policy: BatchPolicy = field(default_factory=BatchPolicy)
    session_options: SessionOptions = field(default_factory=SessionOptions)
    progress: PassProgress = field(default_factory=NoProgress)
    prefix_sharing: int = MIN_SHARED_TOKENS
    prefill_chunk: int = 0
    row_gather: RowGather | None = field(default=None, repr=False)  # selects cache rows on the device

    @property
    def io_binding_device(self) -> str | None:
        """Where the KV cache stays between passes: "cuda" on CUDA (IOBinding: only what the host needs
        comes back), None (plain numpy feeds) on CPU unless ``session_options.io_binding`` forces it."""
        choice = self.session_options.io_binding
        if choice == "auto":
            return "cuda" if self.device == "cuda" else None
        return None if choice == "off" else self.device

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.session.get_outputs()]

    def run(self, feeds: dict[str, Any], *, cache: bool = False) -> Outputs:
        """The outputs of one graph call, by name; the KV cache (``present.*``, the largest outputs by far:
        layers × 2 × batch × heads × length × head size) only when ``cache``, for the passes that continue
        from it. What is not asked for is never copied out of ONNX Runtime. With IOBinding (CUDA) the cache
        stays on the device as ONNX Runtime values, and cache feeds may be such values
        (:mod:`sago_fast.runtime.kv_cache`); every other output comes to the host."""
        names = [n for n in self.output_names if cache or not n.startswith("present.")]
        device = self.io_binding_device
        if device is None:
            return dict(zip(names, self.session.run(names, feeds), strict=True))
        binding = self.session.io_binding()
        for name, value in feeds.items():
            if isinstance(value, np.ndarray):
                binding.bind_cpu_input(name, np.ascontiguousarray(value))
            else:
                binding.bind_ortvalue_input(name, value)
        for name in names:
            binding.bind_output(name, device if name.startswith("present.") else "cpu", 0)
        self.session.run_with_iobinding(binding)
        values = dict(zip(names, binding.get_outputs(), strict=True))
        return {k: v if k.startswith("present.") else v.numpy() for k, v in values.items()}

    def kv_cache(self, out: Outputs) -> KVCache:
        """The ``present.*`` outputs of a pass, where they are: host arrays, or values on the device."""
        presents = {name: out[name] for name in present_names(out)}
        if self.io_binding_device is None or any(isinstance(v, np.ndarray) for v in presents.values()):
            return HostCache(presents)  # (the decode loop's prompt step hands host outputs over)
        if self.row_gather is None:
            self.row_gather = RowGather(self.session.get_providers(), self.io_binding_device)
        return DeviceCache(presents, self.row_gather)

    def shrink_batches(self, failed_size: int) -> None:
        """After an out-of-memory failure at ``failed_size`` prompts, later batches stay below it."""
        policy = self.batch_policy
        smaller = max(1, min(policy.max_batch, failed_size) // 2)
        self.batch_policy = replace(policy, token_budget=max(1, policy.token_budget // 2), max_batch=smaller)
        log.warning("batches shrunk after out of memory: %s", self.batch_policy)

    def run_batches(
        self, batches: Sequence[np.ndarray], run_batch: Callable[[np.ndarray], None], tokens: TokenCounts
    ) -> None:
        """``run_batch`` on each batch (halved on out of memory); progress hears of prompts and tokens."""
        for batch in batches:
            before = tokens["prefill"] + tokens["blocks"]
            run_with_backoff(run_batch, batch, self.shrink_batches)
            self.progress.advance(len(batch), tokens["prefill"] + tokens["blocks"] - before)

    def run_chunked(
        self, ids: np.ndarray, mask: np.ndarray, past: dict[str, Any] | None, *, cache: bool
    ) -> Outputs:
        """The outputs of one pass of ``ids`` (rows, W) over ``past`` (None: a prefill), run in pieces of
        at most ``prefill_chunk`` columns (:func:`chunk_widths`; a graph without a cache runs whole).
        mask: (rows, P + W) over past and new columns. Returns ``hidden_last``, ``hidden_mean``,
        ``next_logprobs`` and, when ``cache``, the ``present.*`` tensors of all P + W columns, as
        :meth:`run` returns them for the whole pass."""
        widths = chunk_widths(ids.shape[1], self.prefill_chunk if self.has_kv_cache else 0)
        if len(widths) == 1:
            return self.run(self._feeds(ids, mask, past), cache=cache)
        done = mask.shape[1] - ids.shape[1]  # columns before this piece (the past's, then earlier pieces')
        start = 0
        sums: np.ndarray | None = None  # (layers, rows, d) token-weighted sum of the pieces' means
        counts = np.zeros(len(ids), dtype=np.int64)  # (rows,) real new tokens so far
        out: Outputs = {}
        for piece, width in enumerate(widths):
            piece_mask = mask[:, : done + width]
            last = piece == len(widths) - 1
            out = self.run(
                self._feeds(ids[:, start : start + width], piece_mask, past), cache=cache or not last
            )
            real = piece_mask[:, done:].sum(1)  # (rows,)
            weighted = out["hidden_mean"].astype(np.float64) * real[None, :, None]
            sums = weighted if sums is None else sums + weighted
            counts += real
            if not last:
                past = self.kv_cache(out).rows(slice(None))  # every row: fed back without a copy
            start += width
            done += width
        assert sums is not None
        out["hidden_mean"] = (sums / np.maximum(counts, 1)[None, :, None]).astype(np.float32)
        return out

    def _feeds(self, ids: np.ndarray, mask: np.ndarray, past: dict[str, Any] | None) -> dict[str, Any]:
        """A prefill's feeds (``past`` None) or those of a pass continuing ``past``."""
        if past is None:
            return prefill_feeds(self.session, ids, mask)
        return continue_feeds(self.session, ids, mask, past)
