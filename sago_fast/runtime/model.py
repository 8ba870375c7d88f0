"""A loaded model: export (cached) + one ORT session + tokenizer, with ``probe(texts)``.

One session on the one graph (``model.onnx``) does everything: prefills (pooled hidden states, next-token
distribution, KV cache), continuation scoring on a prefill's cache or on whole sequences, and greedy
decoding; the weights are held once.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from sago_fast.checkpoints.resolve import Checkpoint, resolve_checkpoint
from sago_fast.errors import DeviceError, InputError
from sago_fast.exporters.cache import ExportCache, ExportedModel
from sago_fast.exporters.optimised_graph import GraphToOpen, graph_to_open, keep_saved_graph
from sago_fast.runtime.batching import BatchPolicy, left_pad, plan_batches, run_with_backoff
from sago_fast.runtime.chunked import CPU_PREFILL_CHUNK, run_chunked
from sago_fast.runtime.generate import (
    Generation,
    GenerationSettings,
    TokenText,
    greedy_generate,
    prefill_feeds,
    takes_segments,
)
from sago_fast.runtime.kv_cache import DeviceCache, HostCache, KVCache, RowGather, present_names
from sago_fast.runtime.prefilled_generation import generate_from_prefill
from sago_fast.runtime.prefix import first_tokens, score_in_blocks, score_on_prefix
from sago_fast.runtime.progress import NoProgress, PassProgress
from sago_fast.runtime.session import SessionOptions, open_session, resolve_device
from sago_fast.runtime.shared_prefix import MIN_SHARED_TOKENS, PrefixTree, head_groups, prefix_trees
from sago_fast.runtime.tree_prefill import prefill_on_head, prefill_trees
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
    pinned: tuple[Any, ...] = ()  # OrtValues the session reads (a LoRA adapter's weights): kept alive
    # prompts sharing this many leading tokens prefill them once (0: off; see runtime/shared_prefix.py)
    prefix_sharing: int = MIN_SHARED_TOKENS
    # prefill passes wider than this many new tokens run in chunks (0: whole; see runtime/chunked.py)
    prefill_chunk: int = 0
    _row_gather: RowGather | None = field(default=None, repr=False)  # selects cache rows on the device

    @property
    def has_kv_cache(self) -> bool:
        """Whether the graph has past inputs (else continuations are scored as whole sequences and
        generation is refused)."""
        return bool(self.exported.manifest.get("kv_cache", True))

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
        :mod:`sago_fast.runtime.prefix`); generation: also decode greedily from the same cache.
        share_keys[i]: prompts share a prefilled prefix only with prompts of the same key (default: any);
        see :mod:`sago_fast.runtime.shared_prefix`. heads[i]: how many of prompt i's first tokens it may
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
                cache = self._kv_cache(out)
                done = score_in_blocks(self._run, cache, mask, out["next_logprobs"], conts, self.pad_id)
            else:  # cuts the cache's last column: on the host
                presents = self._kv_cache(out).host()
                done = score_on_prefix(
                    self._run,
                    presents,
                    ids,
                    mask,
                    out["next_logprobs"],
                    conts,
                    self.batch_policy,
                    self.pad_id,
                )
            for row, i in enumerate(batch):
                scored[i], greedy[i] = done.logprobs[row], done.greedy[row]
            tokens["blocks"] += done.tokens

        generations = None
        if generation is None:
            self._prefill_prompts(
                token_ids, lengths, share_keys, on_prefill, tokens, needs_cache, heads=heads
            )
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

    def _prefill_prompts(
        self,
        token_ids: Sequence[Sequence[int]],
        lengths: np.ndarray,
        share_keys: Sequence[str] | None,
        on_prefill: Callable[..., None],
        tokens: dict[str, int],
        cache: bool,
        trees: Sequence[PrefixTree] | None = None,
        heads: Sequence[int] | None = None,
    ) -> None:
        """Prefill every prompt: those sharing a prefix along their example's prefix tree
        (:mod:`sago_fast.runtime.tree_prefill`; ``trees``: already planned), the others in planned
        batches. heads[i]: prompt i's first tokens that prompts of other keys may share (see
        :func:`~sago_fast.runtime.shared_prefix.head_groups`): each such head that saves more tokens than a
        call costs (``batch_policy.call_overhead``) is prefilled once and its prompts go on from its
        cache."""
        n = len(token_ids)
        self.progress.start("prefill", n, "prompt")

        def run_batch(batch: np.ndarray) -> None:
            ids, mask = left_pad([token_ids[i] for i in batch], self.pad_id)
            out = run_chunked(self, ids, mask, None, cache=cache, chunk=self.prefill_chunk)
            on_prefill(batch, ids, mask, out)

        keys = list(share_keys) if share_keys is not None else [""] * n
        groups = (
            head_groups(token_ids, heads, self.prefix_sharing > 0, self.batch_policy.call_overhead)
            if heads is not None and self.has_kv_cache
            else {}
        )
        on_heads = {i for members in groups.values() for i in members}
        others = [i for i in range(n) if i not in on_heads]
        if trees is None and self.has_kv_cache:
            found = prefix_trees(
                [token_ids[i] for i in others], self.prefix_sharing, [keys[i] for i in others]
            )
            trees = [t.renumbered(others) for t in found]
        trees = trees or []
        in_trees = {i for tree in trees for i in (tree.anchor, *(m for m, _ in tree.members))}
        alone = np.array([i for i in others if i not in in_trees], dtype=np.int64)
        if len(alone):
            batches = [alone[part] for part in plan_batches(lengths[alone], self.batch_policy)]
            self._run_batches(batches, run_batch, tokens)
        if trees:
            prefill_trees(self, token_ids, trees, on_prefill, tokens, cache)
        for head, members in groups.items():
            prefill_on_head(self, token_ids, members, len(head), keys, on_prefill, tokens, cache)

    def _run_batches(
        self, batches: Sequence[np.ndarray], run_batch: Callable[[np.ndarray], None], tokens: dict[str, int]
    ) -> None:
        """``run_batch`` on each batch (halved on out of memory); progress hears of prompts and tokens."""
        for batch in batches:
            before = tokens["prefill"] + tokens["blocks"]
            run_with_backoff(run_batch, batch, self._shrink_batches)
            self.progress.advance(len(batch), tokens["prefill"] + tokens["blocks"] - before)

    def _run(self, feeds: dict[str, Any], *, cache: bool = False) -> dict[str, Any]:
        """The outputs of one graph call, by name; the KV cache (``present.*``, the largest outputs by far:
        layers × 2 × batch × heads × length × head size) only when ``cache``, for the passes that continue
        from it. What is not asked for is never copied out of ONNX Runtime. With IOBinding (CUDA) the cache
        stays on the device as ONNX Runtime values, and cache feeds may be such values
        (:mod:`sago_fast.runtime.kv_cache`); every other output comes to the host."""
        names = [n for n in self._output_names if cache or not n.startswith("present.")]
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

    def _kv_cache(self, out: dict[str, Any]) -> KVCache:
        """The ``present.*`` outputs of a pass, where they are: host arrays, or values on the device."""
        presents = {name: out[name] for name in present_names(out)}
        if self.io_binding_device is None or any(isinstance(v, np.ndarray) for v in presents.values()):
            return HostCache(presents)  # (the decode loop's prompt step hands host outputs over)
        if self._row_gather is None:
            self._row_gather = RowGather(self.session.get_providers(), self.io_binding_device)
        return DeviceCache(presents, self._row_gather)

    @property
    def _output_names(self) -> list[str]:
        return [o.name for o in self.session.get_outputs()]

    def _shrink_batches(self, failed_size: int) -> None:
        """After an out-of-memory failure at ``failed_size`` prompts, later batches stay below it."""
        policy = self.batch_policy
        smaller = max(1, min(policy.max_batch, failed_size) // 2)
        self.batch_policy = replace(policy, token_budget=max(1, policy.token_budget // 2), max_batch=smaller)
        log.warning("batches shrunk after out of memory: %s", self.batch_policy)

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
            result = self._run(feeds)
            logp, best = result["target_logprobs"], result["target_best"]  # (batch, k) each
            for row, i in enumerate(batch):
                out[i] = logp[row, k - wanted[i] :].astype(np.float64)
                targets = ids[row, ids.shape[1] - wanted[i] :]
                greedy[i] = bool((best[row, k - wanted[i] :] == targets).all())

        self.progress.start("score", len(token_ids), "pair")
        for batch in plan_batches(lengths, self.batch_policy):
            run_with_backoff(run_batch, batch, self._shrink_batches)
            self.progress.advance(len(batch), int(lengths[batch].sum()))
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
        trees = prefix_trees(token_ids, self.prefix_sharing, share_keys)
        longest = max((len(ids) for ids in token_ids), default=0)
        if trees or 0 < self.prefill_chunk < longest:
            counts = tokens if tokens is not None else {"prefill": 0, "blocks": 0}
            return generate_from_prefill(self, token_ids, settings, text, trees, on_prefill, counts)
        self.progress.start("generate", len(token_ids), "prompt")
        return greedy_generate(
            self.session,
            token_ids,
            settings,
            text,
            policy=self.batch_policy,
            io_binding=self.io_binding_device,
            on_oom=self._shrink_batches,
            on_batch=self.progress.advance,
            on_prefill=on_prefill,
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
        """Drop the ORT session so its memory is returned before the next model loads."""
        self.session = None

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
    return SagoModel(
        checkpoint=ckpt,
        exported=exported,
        session=session,
        tokenizer=tokenizer,
        device=resolved,
        provider=provider,
        batch_policy=batch_policy or BatchPolicy(),
        session_options=options,
        prefill_chunk=CPU_PREFILL_CHUNK if resolved == "cpu" else 0,
        pinned=tuple(pinned.values()),
    )


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
