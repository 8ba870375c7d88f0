"""A loaded model: export (cached) + one ORT session + tokenizer, with ``probe(texts)``.

One session on the one graph (``model.onnx``) does everything: prefills (pooled hidden states, next-token
distribution, KV cache), continuation scoring on a prefill's cache or on whole sequences, and greedy
decoding; the weights are held once.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from sago_fast.checkpoints.resolve import Checkpoint, resolve_checkpoint
from sago_fast.errors import DeviceError, InputError
from sago_fast.exporters.cache import ExportCache, ExportedModel
from sago_fast.exporters.optimised_graph import GraphToOpen, graph_to_open, keep_saved_graph
from sago_fast.runtime.batching import BatchPolicy, left_pad, plan_batches, run_with_backoff
from sago_fast.runtime.decode import (
    Generation,
    GenerationSettings,
    TokenText,
    greedy_generate,
    prefill_feeds,
    takes_segments,
)
from sago_fast.runtime.engine import PrefillEngine, PromptSet
from sago_fast.runtime.passes import CPU_PREFILL_CHUNK
from sago_fast.runtime.prefill.continuations import first_tokens, score_in_blocks, score_on_prefix
from sago_fast.runtime.prefill.shared_prefix import prefix_trees
from sago_fast.runtime.prefilled_generation import generate_from_prefill
from sago_fast.runtime.session import SessionOptions, open_session, resolve_device
from sago_fast.types import ExportSettings, ProbeResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prefill:
    """What :meth:`SagoModel.prefill` returns, in prompt order.

    continuation_logprobs[i][j]: (len,) float64 log-probs of the tokens of continuation j of prompt i;
    continuation_greedy[i][j]: whether each of those tokens is the first arg-max after what precedes it
    (lm-eval's ``is_greedy``), read from the same passes; generations: greedy continuations (when asked
    for); tokens_processed: every token that went through the graph (prompts once, continuation blocks,
    decode steps), padding excluded.
    """

    probe: ProbeResult
    continuation_logprobs: list[list[np.ndarray]]
    continuation_greedy: list[list[bool]]
    generations: list[Generation] | None
    tokens_processed: int


@dataclass
class SagoModel:
    """An exported checkpoint opened in ONNX Runtime. Create it with :func:`sago_fast.load_model`.

    ``engine`` runs its graph (:class:`~sago_fast.runtime.engine.PrefillEngine`: the session, batches,
    KV caches, prefix trees, chunked prefill); :meth:`configured` gives the same model run with another
    batch policy or progress (the session is shared, nothing is changed on this one)."""

    checkpoint: Checkpoint
    exported: ExportedModel
    tokenizer: Any
    provider: str  # the execution provider that actually runs
    engine: PrefillEngine
    pinned: tuple[Any, ...] = ()  # OrtValues the session reads (a LoRA adapter's weights): kept alive

    def configured(self, **engine_settings: Any) -> SagoModel:
        """This model, its engine's ``batch_policy``, ``progress``, ``prefix_sharing`` or ``prefill_chunk``
        set as given (one session: the copy is as cheap as a dataclass)."""
        return replace(self, engine=replace(self.engine, **engine_settings))

    @property
    def session(self) -> Any:
        return self.engine.session

    @property
    def device(self) -> str:
        """ "cpu" or "cuda" (resolved)."""
        return self.engine.device

    @property
    def batch_policy(self) -> BatchPolicy:
        return self.engine.batch_policy

    @property
    def has_kv_cache(self) -> bool:
        """Whether the graph has past inputs (else continuations are scored as whole sequences and
        generation is refused)."""
        return self.engine.has_kv_cache

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
        return self.engine.pad_id

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
        return self.prefill(token_ids).probe

    def prefill(
        self,
        token_ids: Sequence[Sequence[int]],
        continuations: Sequence[Sequence[Sequence[int]]] | None = None,
        generation: GenerationSettings | None = None,
        share_keys: Sequence[str] | None = None,
        heads: Sequence[int] | None = None,
    ) -> Prefill:
        """One pass over each prompt, and what is built on its KV cache.

        continuations[i]: token lists that continue prompt i exactly (scored on the prompt's cache, see
        :mod:`sago_fast.runtime.prefill.continuations`); generation: also decode greedily from the same cache.
        share_keys[i]: prompts share a prefilled prefix only with prompts of the same key (default: any);
        see :mod:`sago_fast.runtime.prefill.shared_prefix`. heads[i]: how many of prompt i's first tokens it may
        share with prompts of any key (a benchmark's instruction and demonstrations; 0: none; not with
        ``generation``).
        """
        n = len(token_ids)
        layers, d_model = self.n_layers + 1, self.d_model
        vocab = int(self.exported.manifest["vocab_size"])
        hidden_last = np.empty((layers, n, d_model), dtype=np.float32)  # (n_layers + 1, n, d_model)
        hidden_mean = np.empty((layers, n, d_model), dtype=np.float32)  # (n_layers + 1, n, d_model)
        next_logprobs = np.empty((n, vocab), dtype=np.float32)  # (n, vocab)
        lengths = np.array([len(ids) for ids in token_ids], dtype=np.int64)
        scored: list[list[np.ndarray]] = [[] for _ in range(n)]
        greedy: list[list[bool]] = [[] for _ in range(n)]
        tokens = {"prefill": 0, "blocks": 0}
        blocks = takes_segments(self.session)  # options in one block row per prompt (else a row each)
        # the prompts' KV caches leave ONNX Runtime only for continuations scored on them (~5% of a prefill)
        needs_cache = continuations is not None and any(len(c) > 1 for conts in continuations for c in conts)
        if generation is not None:
            self._check_generation()
        if continuations is not None and not self.has_kv_cache:  # no cache to build on: whole sequences
            return self._prefill_whole(token_ids, continuations)

        def on_prefill(
            batch: np.ndarray,
            ids: np.ndarray,
            mask: np.ndarray,
            out: dict[str, np.ndarray],
            new_tokens: int | None = None,
        ) -> None:
            hidden_last[:, batch] = out["hidden_last"]
            hidden_mean[:, batch] = out["hidden_mean"]
            next_logprobs[batch] = out["next_logprobs"]
            tokens["prefill"] += int(mask.sum()) if new_tokens is None else new_tokens
            if continuations is None:
                return
            conts = [continuations[i] for i in batch]
            if not needs_cache:  # no continuation of more than one token: no pass on the cache
                done = first_tokens(out["next_logprobs"], conts)
            elif blocks:
                cache = self.engine.kv_cache(out)
                done = score_in_blocks(self.engine, cache, mask, out["next_logprobs"], conts)
            else:  # cuts the cache's last column: on the host
                presents = self.engine.kv_cache(out).host()
                done = score_on_prefix(self.engine, presents, ids, mask, out["next_logprobs"], conts)
            for row, i in enumerate(batch):
                scored[i], greedy[i] = done.logprobs[row], done.greedy[row]
            tokens["blocks"] += done.tokens

        generations = None
        if generation is None:
            prompts = PromptSet(token_ids, lengths, share_keys, heads)
            self.engine.prefill_prompts(prompts, on_prefill, tokens, needs_cache)
        else:
            generations = self._generate(token_ids, generation, on_prefill, share_keys, tokens)
        processed = tokens["prefill"] + tokens["blocks"]
        if generations is not None:
            processed += sum(max(len(g.token_ids) - 1, 0) for g in generations)
        return Prefill(
            ProbeResult(hidden_last, hidden_mean, next_logprobs, lengths),
            scored,
            greedy,
            generations,
            processed,
        )

    def _prefill_whole(
        self, token_ids: Sequence[Sequence[int]], continuations: Sequence[Sequence[Sequence[int]]]
    ) -> Prefill:
        """A graph without a KV cache: the probe pass, and every prompt + continuation as one sequence."""
        probe = self.prefill(token_ids)
        scored: list[list[np.ndarray]] = [[] for _ in token_ids]
        greedy: list[list[bool]] = [[] for _ in token_ids]
        pairs = [(i, c) for i, conts in enumerate(continuations) for c in conts]
        whole = self._score_whole([[*token_ids[i], *c] for i, c in pairs], [len(c) for _, c in pairs])
        for (i, _), values, is_greedy in zip(pairs, *whole, strict=True):
            scored[i].append(values)
            greedy[i].append(is_greedy)
        processed = probe.tokens_processed + sum(len(token_ids[i]) + len(c) for i, c in pairs)
        return Prefill(probe.probe, scored, greedy, None, processed)

    def target_logprobs(
        self, token_ids: Sequence[Sequence[int]], n_targets: Sequence[int]
    ) -> list[np.ndarray]:
        """For each sequence, log P of its last ``n_targets[i]`` tokens given everything before them.

        Whole sequences, one forward pass per length-bucketed batch; only (batch, K) log-probs leave the
        graph. (:meth:`prefill` scores continuations on a shared prompt's cache instead.)
        Returns one float64 array of length n_targets[i] per sequence.
        """
        return self._score_whole(token_ids, n_targets)[0]

    def _score_whole(
        self, token_ids: Sequence[Sequence[int]], n_targets: Sequence[int]
    ) -> tuple[list[np.ndarray], list[bool]]:
        """:meth:`target_logprobs`, and whether each sequence's last ``n_targets[i]`` tokens are each the
        first arg-max after what precedes them."""
        lengths = np.array([len(ids) for ids in token_ids], dtype=np.int64)
        wanted = np.asarray(n_targets, dtype=np.int64)  # (n,)
        if (wanted < 1).any() or (wanted >= lengths).any():
            raise InputError("each sequence needs at least one target token and one token before it")
        out: list[np.ndarray] = [np.empty(0)] * len(token_ids)
        greedy = [False] * len(token_ids)

        def run_batch(batch: np.ndarray) -> None:
            ids, mask = left_pad([token_ids[i] for i in batch], self.pad_id)
            k = int(wanted[batch].max())
            feeds = prefill_feeds(self.session, ids, mask)
            feeds["target_ids"] = np.ascontiguousarray(ids[:, -k:])
            result = self.engine.run(feeds)
            logp, best = result["target_logprobs"], result["target_best"]  # (batch, k) each
            for row, i in enumerate(batch):
                out[i] = logp[row, k - wanted[i] :].astype(np.float64)
                targets = ids[row, ids.shape[1] - wanted[i] :]
                greedy[i] = bool((best[row, k - wanted[i] :] == targets).all())

        self.engine.progress.start("score", len(token_ids), "pair")
        for batch in plan_batches(lengths, self.batch_policy):
            run_with_backoff(run_batch, batch, self.engine.shrink_batches)
            self.engine.progress.advance(len(batch), int(lengths[batch].sum()))
        return out, greedy

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
        return self._generate(token_ids, settings or GenerationSettings(), None)

    def _check_generation(self) -> None:
        if not self.has_kv_cache:
            raise InputError(
                f"{self.checkpoint.display_path}: this architecture's graph with a KV cache could not be "
                "exported, so it cannot generate; use multiple-choice or pairwise datasets"
            )

    def _generate(
        self,
        token_ids: Sequence[Sequence[int]],
        settings: GenerationSettings,
        on_prefill: Any,
        share_keys: Sequence[str] | None = None,
        tokens: dict[str, int] | None = None,
    ) -> list[Generation]:
        """Greedy continuations. Prompts that share a prefix (:func:`prefix_trees` under ``share_keys``) or
        are longer than ``prefill_chunk`` get their prompt step from the prefill
        (:mod:`sago_fast.runtime.prefilled_generation`); otherwise the decode loop's first step is a
        plain pass over each batch of prompts."""
        self._check_generation()
        text = TokenText(
            self.pad_id,
            frozenset(self.exported.manifest.get("eos_token_ids", [])),
            lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True),
        )
        trees = prefix_trees(token_ids, self.engine.prefix_sharing, share_keys)
        longest = max((len(ids) for ids in token_ids), default=0)
        if trees or 0 < self.engine.prefill_chunk < longest:
            counts = tokens if tokens is not None else {"prefill": 0, "blocks": 0}
            return generate_from_prefill(self.engine, token_ids, settings, text, trees, on_prefill, counts)
        self.engine.progress.start("generate", len(token_ids), "prompt")
        return greedy_generate(self.engine, token_ids, settings, text, on_prefill)

    def close(self) -> None:
        """Drop the ORT session so its memory is returned before the next model loads."""
        self.engine.session = None

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
    A LoRA adapter opens its base's export with its adapted weights (see :mod:`sago_fast.exporters.lora`).
    """
    from transformers import AutoTokenizer

    resolved = resolve_device(device)
    settings = ExportSettings.for_device(resolved, dtype)
    ckpt = (
        checkpoint
        if isinstance(checkpoint, Checkpoint)
        else resolve_checkpoint(checkpoint, allow_pickle=allow_pickle)
    )
    exported = ExportCache(cache_dir).get_or_export(ckpt.base or ckpt, settings)
    options = session_options or SessionOptions()
    pinned = _adapter_initializers(ckpt, exported) if ckpt.is_adapter else {}
    # ONNX Runtime builds the session without the GIL: the tokenizer (and transformers' import) loads
    # meanwhile (~1.5 s sooner on a 2-core CPU)
    graph = _graph_to_open(exported, resolved, options, bool(pinned))
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sago-session") as pool:
        opening = pool.submit(_open_graph, graph, exported, resolved, options, pinned)
        tokenizer = AutoTokenizer.from_pretrained(exported.path)
        session, provider = opening.result()
    if batch_policy is None and resolved == "cuda":
        batch_policy = _policy_for_free_memory(exported.manifest)
    engine = PrefillEngine(
        session,
        resolved,
        pad_token_id(tokenizer),
        bool(exported.manifest.get("kv_cache", True)),
        batch_policy=batch_policy or BatchPolicy(),
        session_options=options,
        prefill_chunk=CPU_PREFILL_CHUNK if resolved == "cpu" else 0,
    )
    return SagoModel(ckpt, exported, tokenizer, provider, engine, pinned=tuple(pinned.values()))


def pad_token_id(tokenizer: Any) -> int:
    """The id padding is filled with: the tokenizer's pad or end-of-sequence token (masked out: any valid
    id works, 0 where it has neither)."""
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if candidate is not None:
            return int(candidate)
    return 0


def _graph_to_open(
    exported: ExportedModel, device: str, options: SessionOptions, pinned: bool
) -> GraphToOpen:
    """The graph a session of ``exported`` opens: on CPU at the default optimisation level, ONNX Runtime's
    optimised graph kept beside the export (saved by the first session that optimises it, not by one
    whose weights are replaced: an adapter's), see :mod:`sago_fast.exporters.optimised_graph`."""
    if device != "cpu" or options.optimization != SessionOptions().optimization:
        return GraphToOpen(exported.model_path)
    shared = exported.manifest.get("graph_from")
    donor = exported.path.parent / shared if shared else None
    return graph_to_open(exported.model_path, donor, can_save=not pinned)


def _open_graph(
    graph: GraphToOpen, exported: ExportedModel, device: str, options: SessionOptions, pinned: dict[str, Any]
) -> tuple[Any, str]:
    """The session of ``graph``; where that fails while saving ONNX Runtime's optimised graph (a full disk)
    or on a saved one, the session of the exported graph itself, saving nothing."""
    try:
        opened = open_session(
            graph.path, device, options, pinned, optimised=graph.optimised, save_optimised=graph.save_to
        )
    except DeviceError as exc:
        # the exported graph itself, saving nothing: there is nothing to fall back to
        if not graph.optimised and graph.save_to is None:
            raise
        if graph.save_to is not None:
            shutil.rmtree(graph.save_to, ignore_errors=True)
        log.warning("%s; opening the exported graph itself", exc)
        return open_session(exported.model_path, device, options, pinned)
    keep_saved_graph(graph, exported.model_path)
    return opened


def _adapter_initializers(adapter: Checkpoint, exported: ExportedModel) -> dict[str, Any]:
    """Name -> OrtValue of every weight ``adapter`` changes in its base's graph."""
    import onnxruntime as ort

    from sago_fast.errors import ExportError
    from sago_fast.exporters.lora import adapted_weights

    reweight = exported.manifest.get("reweight")
    if not reweight:
        raise ExportError(
            f"{adapter.path}: the base's graph ({exported.path}) does not keep its weights by name; "
            "an adapter cannot be applied to it"
        )
    weights = adapted_weights(adapter, exported.model_path, reweight["names"])
    return {name: ort.OrtValue.ortvalue_from_numpy(array) for name, array in weights.items()}


def _policy_for_free_memory(manifest: dict[str, Any]) -> BatchPolicy:
    """On CUDA: a token budget sized from the free device memory (the back-off covers misjudgements)."""
    from sago_fast.runtime.batching import CUDA_CALL_OVERHEAD, free_cuda_memory, token_budget_for_memory

    free = free_cuda_memory()
    if free is None:
        return BatchPolicy(call_overhead=CUDA_CALL_OVERHEAD)
    budget = token_budget_for_memory(
        free, int(manifest["n_layers"]), int(manifest["d_model"]), 2 if manifest["dtype"] == "fp16" else 4
    )
    log.info("CUDA: %.1f GiB free -> token budget %d", free / 2**30, budget)
    return BatchPolicy(token_budget=budget, max_batch=256, call_overhead=CUDA_CALL_OVERHEAD)
