"""Length bucketing, token-budget batches, left padding, and out-of-memory back-off."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sago_fast.errors import InputError

log = logging.getLogger(__name__)


# One more ONNX Runtime call costs about as much as this many padded tokens on CPU: a call of SmolLM2-135M
# takes ~30-50 ms before its first token (its weights read once, ~540 MB) and a token ~0.75 ms on the
# 2-core development machine. 200 real 0-shot MMLU prompts (19.7k tokens) prefill in 15.5 s planned with
# it against 16.7 s planned with 256 (26 calls, 10% padding; medians of 3), 17.4 s with 0.
CPU_CALL_OVERHEAD = 48
# On CUDA a token costs far less next to a call (kernel launches over ~3,600 nodes); not measured there.
CUDA_CALL_OVERHEAD = 256


@dataclass(frozen=True)
class BatchPolicy:
    """How prompts are grouped into ORT calls.

    token_budget: maximum padded tokens (batch * longest prompt) in one call. The default suits CPUs: on
        the 2-core development machine SmolLM2-135M prefills ~8% more tokens/s in calls of 2-4k tokens
        than of 8k (the activations stay in cache); on CUDA the budget is sized from free memory instead.
    max_batch: maximum prompts in one call, whatever their length.
    call_overhead: what one more call costs, in padded tokens: the planner takes a call more only where
        it saves at least this much padding (see :func:`plan_batches`); the default is the CPU's
        (:data:`CPU_CALL_OVERHEAD`), CUDA's policy takes :data:`CUDA_CALL_OVERHEAD`.
    """

    token_budget: int = 4096
    max_batch: int = 64
    call_overhead: int = CPU_CALL_OVERHEAD

    def __post_init__(self) -> None:
        if self.token_budget < 1 or self.max_batch < 1:
            raise InputError("token_budget and max_batch must be positive")
        if self.call_overhead < 0:
            raise InputError("call_overhead must be zero or positive")


def plan_batches(
    lengths: Sequence[int] | np.ndarray, policy: BatchPolicy = BatchPolicy()
) -> list[np.ndarray]:
    """Group prompt indices into batches of similar length within the token budget.

    Prompts are sorted by length (longest first, stable) and cut into runs of consecutive prompts so that
    the padded tokens (``len(batch) * longest``) plus ``call_overhead`` per call add up to the least
    possible (dynamic programming over the cut points), with ``len(batch) <= max_batch`` and
    ``len(batch) * longest <= token_budget`` (a single prompt longer than the budget forms its own batch).
    Cutting greedily at the budget instead pads a batch of 60- to 200-token prompts to 200 tokens.
    Returns index arrays that together cover every prompt exactly once, longest batch first.
    """
    lengths = np.asarray(lengths, dtype=np.int64)  # (n,)
    order = np.argsort(-lengths, kind="stable")
    ordered = np.maximum(lengths[order], 1)  # (n,) descending
    n = len(order)
    best = np.zeros(n + 1, dtype=np.float64)  # best[i]: least cost of prompts i.. (sorted)
    cut = np.zeros(n, dtype=np.int64)  # cut[i]: size of the batch that starts at i
    for start in range(n - 1, -1, -1):
        longest = int(ordered[start])
        cap = max(1, min(policy.max_batch, policy.token_budget // longest, n - start))
        sizes = np.arange(1, cap + 1)  # (cap,)
        costs = sizes * longest + policy.call_overhead + best[start + 1 : start + cap + 1]
        pick = int(np.argmin(costs[::-1]))  # the largest batch among equal costs
        cut[start] = cap - pick
        best[start] = costs[cap - 1 - pick]
    batches: list[np.ndarray] = []
    start = 0
    while start < n:
        batches.append(order[start : start + cut[start]])
        start += int(cut[start])
    return batches


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Left-pad token id lists. Returns (input_ids, attention_mask), both (batch, max_len) int64."""
    width = max(len(s) for s in sequences)
    ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(sequences), width), dtype=np.int64)
    for row, seq in enumerate(sequences):
        if len(seq):
            ids[row, width - len(seq) :] = seq
            mask[row, width - len(seq) :] = 1
    return ids, mask


OOM_MARKERS = (
    "out of memory",
    "failed to allocate memory",
    "cudnn_status_alloc_failed",
    "cublas_status_alloc_failed",
)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether an ONNX Runtime error is an allocation failure (CUDA / arena out of memory)."""
    text = str(exc).lower()
    return any(marker in text for marker in OOM_MARKERS)


def run_with_backoff(
    run_batch: Callable[[np.ndarray], None],
    batch: np.ndarray,
    on_oom: Callable[[int], None] | None = None,
) -> None:
    """``run_batch(batch)``; when it runs out of device memory, run each half instead (recursively), so a
    batch too large for the free memory costs one failed attempt, not the run. ``on_oom(size)`` hears of
    each failed size (to shrink later batches). One prompt that does not fit is a DeviceError."""
    from sago_fast.errors import DeviceError

    try:
        run_batch(batch)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        if len(batch) == 1:
            raise DeviceError(
                f"out of device memory on a single prompt ({str(exc).splitlines()[0][:200]}); use a shorter "
                "prompt, fp16, or a larger device"
            ) from None
        if on_oom is not None:
            on_oom(len(batch))
        log.warning(
            "out of memory on a batch of %d: retrying as two batches of %d", len(batch), len(batch) // 2
        )
        half = len(batch) // 2
        run_with_backoff(run_batch, batch[:half], on_oom)
        run_with_backoff(run_batch, batch[half:], on_oom)


def token_budget_for_memory(
    free_bytes: int, n_layers: int, d_model: int, bytes_per_value: int, fraction: float = 0.5
) -> int:
    """A token budget that leaves room in ``free_bytes``: ``fraction`` of it divided by an estimate of
    the activation bytes one prompt token needs at peak (~ 16 d_model for the transient attention/MLP
    tensors + (n_layers + 1) d_model for the hidden states pooled at the end), clamped to [256, 262144]."""
    per_token = bytes_per_value * d_model * (16 + 2 * (n_layers + 1))
    return int(min(max(free_bytes * fraction // max(per_token, 1), 256), 262144))


def free_cuda_memory() -> int | None:
    """Free bytes on CUDA device 0 (torch if it has CUDA, else nvidia-smi), or None when unknown."""
    try:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.mem_get_info()[0])
    except Exception:  # a CPU-only torch, or no driver
        pass
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        return int(float(out.strip().splitlines()[0]) * 2**20)
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None
