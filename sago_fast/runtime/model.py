"""A loaded model: export (cached) + ORT session + tokenizer, with ``probe(texts)``."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sago_fast.checkpoints.resolve import Checkpoint, resolve_checkpoint
from sago_fast.errors import InputError
from sago_fast.exporters.cache import ExportCache, ExportedModel
from sago_fast.runtime.batching import BatchPolicy, left_pad, plan_batches, run_with_backoff
from sago_fast.runtime.generate import Generation, GenerationSettings, greedy_generate
from sago_fast.runtime.progress import NoProgress, PassProgress
from sago_fast.runtime.session import SessionOptions, open_session, resolve_device
from sago_fast.types import ExportSettings, ProbeResult

log = logging.getLogger(__name__)


@dataclass
class SagoModel:
    """An exported checkpoint opened in ONNX Runtime. Create it with :func:`sago_fast.load_model`."""

    checkpoint: Checkpoint
    exported: ExportedModel
    session: Any
    tokenizer: Any
    device: str  # "cpu" or "cuda" (resolved)
    provider: str  # the execution provider that actually runs
    batch_policy: BatchPolicy = field(default_factory=BatchPolicy)
    session_options: SessionOptions = field(default_factory=SessionOptions)
    progress: PassProgress = field(default_factory=NoProgress)  # hears of every batch of every pass
    _score_session: Any = None
    _decode_session: Any = None

    @property
    def model_id(self) -> str:
        """Content hash of the checkpoint (weights, config, tokenizer)."""
        return self.checkpoint.content_hash

    @property
    def n_layers(self) -> int:
        return int(self.exported.manifest["n_layers"])

    @property
    def d_model(self) -> int:
        return int(self.exported.manifest["d_model"])

    @property
    def max_positions(self) -> int | None:
        return self.exported.manifest.get("max_positions")

    @property
    def pad_id(self) -> int:
        for candidate in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id):
            if candidate is not None:
                return int(candidate)
        return 0  # masked out: any valid id works

    def tokenize(self, texts: Sequence[str], reserve: int = 0) -> list[list[int]]:
        """Token ids with the tokenizer's default encoding; rejects empty prompts and prompts longer than
        the model's positions minus ``reserve`` (room kept for generated tokens)."""
        if isinstance(texts, str):
            raise InputError("probe() takes a list of texts, not a single string")
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise InputError(f"text {index}: expected a string, got {type(text).__name__}")
        encoded = self.tokenizer(list(texts), add_special_tokens=True)["input_ids"]
        limit = self.max_positions
        for index, ids in enumerate(encoded):
            if len(ids) == 0:
                raise InputError(f"text {index}: empty prompt (0 tokens)")
            if limit is not None and len(ids) + reserve > limit:
                extra = f" + {reserve} new tokens" if reserve else ""
                raise InputError(
                    f"text {index}: {len(ids)} tokens{extra}, longer than the model's {limit} positions"
                )
        return [list(ids) for ids in encoded]

    def probe(self, texts: Sequence[str]) -> ProbeResult:
        """Pooled hidden states of every layer and next-token log-probs for each text.

        Batched by similar length under a token budget; results come back in input order and equal
        probing each text alone (left padding with position ids from the mask).
        """
        token_ids = self.tokenize(texts)
        return self.probe_ids(token_ids)

    def probe_ids(self, token_ids: Sequence[Sequence[int]]) -> ProbeResult:
        """:meth:`probe` on already tokenised prompts (each non-empty)."""
        n = len(token_ids)
        layers, d_model = self.n_layers + 1, self.d_model
        vocab = int(self.exported.manifest["vocab_size"])
        hidden_last = np.empty((layers, n, d_model), dtype=np.float32)  # (n_layers + 1, n, d_model)
        hidden_mean = np.empty((layers, n, d_model), dtype=np.float32)  # (n_layers + 1, n, d_model)
        next_logprobs = np.empty((n, vocab), dtype=np.float32)  # (n, vocab)
        lengths = np.array([len(ids) for ids in token_ids], dtype=np.int64)

        def run_batch(batch: np.ndarray) -> None:
            ids, mask = left_pad([token_ids[i] for i in batch], self.pad_id)
            last, mean, logp = self.session.run(None, {"input_ids": ids, "attention_mask": mask})
            hidden_last[:, batch] = last
            hidden_mean[:, batch] = mean
            next_logprobs[batch] = logp

        self.progress.start("probe", n, "prompt")
        for batch in plan_batches(lengths, self.batch_policy):
            run_with_backoff(run_batch, batch, self._shrink_batches)
            self.progress.advance(len(batch), int(lengths[batch].sum()))
        return ProbeResult(hidden_last, hidden_mean, next_logprobs, lengths)

    def _shrink_batches(self, failed_size: int) -> None:
        """After an out-of-memory failure at ``failed_size`` prompts, later batches stay below it."""
        policy = self.batch_policy
        smaller = max(1, min(policy.max_batch, failed_size) // 2)
        self.batch_policy = BatchPolicy(token_budget=max(1, policy.token_budget // 2), max_batch=smaller)
        log.warning("batches shrunk after out of memory: %s", self.batch_policy)

    @property
    def score_session(self) -> Any:
        """The scoring graph's session (target-token log-probs), opened on first use."""
        if self._score_session is None:
            path = self.exported.path / self.exported.manifest["files"]["score"]
            self._score_session, _ = open_session(path, self.device, self.session_options)
        return self._score_session

    def target_logprobs(
        self, token_ids: Sequence[Sequence[int]], n_targets: Sequence[int]
    ) -> list[np.ndarray]:
        """For each sequence, log P of its last ``n_targets[i]`` tokens given everything before them.

        One forward pass per length-bucketed batch; only (batch, K) log-probs leave the graph.
        Returns one float64 array of length n_targets[i] per sequence.
        """
        lengths = np.array([len(ids) for ids in token_ids], dtype=np.int64)
        wanted = np.asarray(n_targets, dtype=np.int64)  # (n,)
        if (wanted < 1).any() or (wanted >= lengths).any():
            raise InputError("each sequence needs at least one target token and one token before it")
        out: list[np.ndarray] = [np.empty(0)] * len(token_ids)

        def run_batch(batch: np.ndarray) -> None:
            ids, mask = left_pad([token_ids[i] for i in batch], self.pad_id)
            k = int(wanted[batch].max())
            targets = np.ascontiguousarray(ids[:, -k:])
            (logp,) = self.score_session.run(
                None, {"input_ids": ids, "attention_mask": mask, "target_ids": targets}
            )
            for row, i in enumerate(batch):
                out[i] = logp[row, k - wanted[i] :].astype(np.float64)

        self.progress.start("score", len(token_ids), "pair")
        for batch in plan_batches(lengths, self.batch_policy):
            run_with_backoff(run_batch, batch, self._shrink_batches)
            self.progress.advance(len(batch), int(lengths[batch].sum()))
        return out

    @property
    def decode_session(self) -> Any:
        """The decode graph's session (one greedy step with a KV cache), opened on first use."""
        if self._decode_session is None:
            path = self.exported.path / self.exported.manifest["files"]["decode"]
            self._decode_session, _ = open_session(path, self.device, self.session_options)
        return self._decode_session

    def generate(self, texts: Sequence[str], settings: GenerationSettings | None = None) -> list[Generation]:
        """Greedy continuations of ``texts`` (token-identical to HF ``generate(do_sample=False)``).

        Batched by length with left padding; see :class:`GenerationSettings` for the limits and stop rules.
        """
        settings = settings or GenerationSettings()
        return self.generate_ids(self.tokenize(texts, reserve=settings.max_new_tokens), settings)

    def generate_ids(
        self, token_ids: Sequence[Sequence[int]], settings: GenerationSettings | None = None
    ) -> list[Generation]:
        """:meth:`generate` on already tokenised prompts (each non-empty)."""
        self.progress.start("generate", len(token_ids), "prompt")
        return greedy_generate(
            self.decode_session,
            token_ids,
            settings or GenerationSettings(),
            pad_id=self.pad_id,
            eos_ids=self.exported.manifest.get("eos_token_ids", []),
            decode=lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True),
            policy=self.batch_policy,
            io_binding=self.io_binding_device,
            on_oom=self._shrink_batches,
            on_batch=self.progress.advance,
        )

    @property
    def io_binding_device(self) -> str | None:
        """Where the decode loop keeps its KV cache between steps: "cuda" on CUDA (IOBinding: only the
        chosen token ids come back to the host each step), None (plain numpy feeds) on CPU unless
        ``session_options.io_binding`` forces it."""
        choice = self.session_options.io_binding
        if choice == "auto":
            return "cuda" if self.device == "cuda" else None
        return None if choice == "off" else self.device

    def close(self) -> None:
        """Drop the ORT sessions so their memory is returned before the next model loads."""
        self.session = None
        self._score_session = None
        self._decode_session = None

    def __enter__(self) -> SagoModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_model(
    checkpoint: str | os.PathLike[str] | Checkpoint,
    device: str = "cpu",
    *,
    dtype: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    batch_policy: BatchPolicy | None = None,
    session_options: SessionOptions | None = None,
    allow_pickle: bool = False,
) -> SagoModel:
    """Export ``checkpoint`` (cached by content) and open it in ONNX Runtime.

    device: "cpu", "cuda" or "auto" (CUDA when it really runs, else CPU).
    dtype: "fp32" or "fp16"; default fp16 on CUDA and fp32 on CPU.
    """
    from transformers import AutoTokenizer

    resolved = resolve_device(device)
    settings = ExportSettings(dtype=dtype or ("fp16" if resolved == "cuda" else "fp32"))
    ckpt = (
        checkpoint
        if isinstance(checkpoint, Checkpoint)
        else resolve_checkpoint(checkpoint, allow_pickle=allow_pickle)
    )
    exported = ExportCache(cache_dir).get_or_export(ckpt, settings)
    session, provider = open_session(exported.probe_path, resolved, session_options or SessionOptions())
    if batch_policy is None and resolved == "cuda":
        batch_policy = _policy_for_free_memory(exported.manifest)
    tokenizer = AutoTokenizer.from_pretrained(exported.path)
    return SagoModel(
        checkpoint=ckpt,
        exported=exported,
        session=session,
        tokenizer=tokenizer,
        device=resolved,
        provider=provider,
        batch_policy=batch_policy or BatchPolicy(),
        session_options=session_options or SessionOptions(),
    )


def _policy_for_free_memory(manifest: dict[str, Any]) -> BatchPolicy:
    """On CUDA: a token budget sized from the free device memory (the back-off covers misjudgements)."""
    from sago_fast.runtime.batching import free_cuda_memory, token_budget_for_memory

    free = free_cuda_memory()
    if free is None:
        return BatchPolicy()
    budget = token_budget_for_memory(
        free, int(manifest["n_layers"]), int(manifest["d_model"]), 2 if manifest["dtype"] == "fp16" else 4
    )
    log.info("CUDA: %.1f GiB free -> token budget %d", free / 2**30, budget)
    return BatchPolicy(token_budget=budget, max_batch=256)
