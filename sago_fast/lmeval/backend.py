"""``SagoLM``: an lm-evaluation-harness model backend on sago's ONNX Runtime path.

lm-eval users call it as they call ``hf``::

    import sago_fast.lmeval  # registers "sago"
    lm_eval.simple_evaluate(model="sago", model_args="pretrained=PATH,device=cpu", tasks=[...])

``pretrained`` takes one checkpoint as ``sago run -m`` does: an HF folder or hub id, a ``.gguf`` file, or
a PEFT LoRA adapter folder (over ``base=`` or its own base). A training-run folder, a glob or a list file
names many: :func:`sago_fast.lmeval.each.evaluate_each` (and ``sago lm-eval``) takes them one after the
other through one export.

Tokenisation, cutting to ``max_length``, stop sequences and the text returned follow lm-eval's ``hf``
backend with its own helpers, so the numbers equal ``--model hf`` (fp32): what differs is the engine.

- ``loglikelihood``: every continuation of one context on one prefill (option blocks), see
  :mod:`sago_fast.lmeval.requests`; ``is_greedy`` is exact (a greedy decode checks the continuations of
  more than one token whose first token is the arg-max).
- ``loglikelihood_rolling``: lm-eval's disjoint windows, scored as above.
- ``generate_until``: greedy decoding on the KV-cache path with the request's stop sequences; a request
  asking to sample is refused in one line.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from lm_eval.api.model import TemplateLM
from lm_eval.models.utils import (
    _add_special_kwargs,
    handle_stop_sequences,
    has_bos_prefix,
    normalize_gen_kwargs,
    postprocess_generated_text,
    resolve_max_length,
)
from tqdm.auto import tqdm

from sago_fast.errors import InputError
from sago_fast.lmeval.arguments import engine_device, preflight, sago_dtype
from sago_fast.lmeval.request_log import RequestLog
from sago_fast.lmeval.requests import group_pairs, passes
from sago_fast.runtime.batching import BatchPolicy
from sago_fast.runtime.decode import GenerationSettings
from sago_fast.runtime.prefill.shared_prefix import common_heads

log = logging.getLogger(__name__)

DEFAULT_MAX_GEN_TOKS = 256  # lm-eval hf's default
IGNORED_ARGS = ("trust_remote_code", "parallelize", "use_fast_tokenizer", "revision")


def say_cut(n_cut: int, n_requests: int, max_length: int) -> None:
    """One warning when requests were longer than the model and cut from the left (lm-eval's rule, as
    ``sago run`` cuts prompts and says so)."""
    if n_cut:
        log.warning(
            "%d of %d requests are longer than the model's %d positions: each is cut from the left of its "
            "context, as lm-eval's hf backend cuts it",
            n_cut,
            n_requests,
            max_length,
        )


class SagoLM(TemplateLM):
    """lm-eval's ``LM`` on a sago model (one checkpoint; see the module docstring for the arguments).

    pretrained: the checkpoint; base: a LoRA adapter's base; device: cpu, cuda (CPU where CUDA does not
    run, with a warning, as ``hf``), or auto; dtype: float32,
    float16 or auto (fp16 on CUDA, fp32 on CPU); cache_dir: sago's export cache; batch_size: an int caps the
    prompts per ORT call (sago batches by a token budget; lm-eval's "auto" keeps sago's policy);
    max_length: positions (default: the model config's, as lm-eval's ``hf``); add_bos_token,
    prefix_token_id: as ``hf``; sago_db: a results file that receives every request and its result
    (table ``lmeval_requests``); token_budget: padded tokens per ORT call.
    """

    def __init__(
        self,
        pretrained: str | os.PathLike[str],
        device: str | None = "cpu",
        dtype: str | None = None,
        batch_size: int | str | None = None,
        max_batch_size: int | None = None,
        base: str | None = None,
        cache_dir: str | None = None,
        max_length: int | None = None,
        add_bos_token: bool | None = None,
        prefix_token_id: int | None = None,
        sago_db: str | None = None,
        token_budget: int | None = None,
        allow_pickle: bool = False,
        **others: Any,
    ) -> None:
        super().__init__()
        from sago_fast.checkpoints.resolve import resolve_checkpoint
        from sago_fast.runtime.model import load_model

        unknown = sorted(set(others) - set(IGNORED_ARGS))
        if unknown:
            raise InputError(
                f"model_args: the sago backend takes no {', '.join(unknown)} (it takes pretrained, base, "
                "device, dtype, batch_size, cache_dir, max_length, add_bos_token, prefix_token_id, "
                "sago_db, token_budget, allow_pickle)"
            )
        preflight(cache_dir, sago_db, batch_size)  # before any export or load
        device = engine_device(device)
        checkpoint = resolve_checkpoint(str(pretrained), base=base, allow_pickle=bool(allow_pickle))
        caps: dict[str, int] = {}  # what the user set of the device's batch policy
        if isinstance(batch_size, int) or (isinstance(batch_size, str) and batch_size.isdigit()):
            caps["max_batch"] = max(int(batch_size), 1)
        if token_budget is not None:
            caps["token_budget"] = int(token_budget)
        BatchPolicy(**caps)  # a bad cap is an error before any export
        self.model = load_model(
            checkpoint, device, dtype=sago_dtype(dtype), cache_dir=cache_dir, allow_pickle=bool(allow_pickle)
        )
        self.model = self.model.configured(batch_policy=replace(self.model.batch_policy, **caps))
        self.tokenizer = self.model.tokenizer
        self.add_bos_token = add_bos_token
        self.custom_prefix_token_id = prefix_token_id
        self._max_length = int(max_length) if max_length else None
        self.pretrained = str(pretrained)
        self.records = RequestLog(sago_db, self.model) if sago_db else None

    # -- what lm-eval asks of a model ---------------------------------------------------------------
    @property
    def eot_token_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    @property
    def prefix_token_id(self) -> int:
        if self.custom_prefix_token_id is not None:
            return int(self.custom_prefix_token_id)
        if self.tokenizer.bos_token_id is not None:
            return int(self.tokenizer.bos_token_id)
        return self.eot_token_id

    @property
    def max_length(self) -> int:
        if self._max_length:
            return self._max_length
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(self.model.exported.path)
        self._max_length = resolve_max_length(config, self.tokenizer)
        if self.model.max_positions is not None:
            self._max_length = min(self._max_length, int(self.model.max_positions))
        return self._max_length

    @property
    def max_gen_toks(self) -> int:
        return DEFAULT_MAX_GEN_TOKS

    @property
    def device(self) -> str:
        return self.model.device

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.tokenizer, "name_or_path", "")).replace("/", "__")

    def tok_encode(
        self,
        string: str,
        add_special_tokens: bool | None = None,
        left_truncate_len: int | None = None,
        **_: Any,
    ) -> list[int]:
        """lm-eval ``hf``'s encoding: the tokenizer's special tokens unless the text starts with BOS."""
        options = _add_special_kwargs(add_special_tokens, self.add_bos_token)
        if add_special_tokens is None and has_bos_prefix(string, self.tokenizer.decode(self.prefix_token_id)):
            options["add_special_tokens"] = False
        ids = list(self.tokenizer.encode(string, **options))
        return ids[-left_truncate_len:] if left_truncate_len else ids

    def tok_decode(self, tokens: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        return self.tokenizer.apply_chat_template(
            chat_history,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=not add_generation_prompt,
        )

    # -- log-likelihoods ----------------------------------------------------------------------------
    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        results = super().loglikelihood(requests, disable_tqdm=disable_tqdm)
        if self.records is not None:
            self.records.add_loglikelihoods(requests, results)
        return results

    def _loglikelihood_tokens(
        self, requests: list[tuple[Any, list[int], list[int]]], disable_tqdm: bool = False, **_: Any
    ) -> list[tuple[float, bool]]:
        """(log-likelihood, is_greedy) of each (key, context ids, continuation ids), one prefill per
        distinct context; is_greedy is read from the same passes (the arg-max at every position)."""
        groups = group_pairs([(ctx, cont) for _, ctx, cont in requests], self.max_length)
        say_cut(
            sum(len(ctx) + len(cont) > self.max_length + 1 for _, ctx, cont in requests),
            len(requests),
            self.max_length,
        )
        loglik = np.zeros(len(requests), dtype=np.float64)
        greedy = np.zeros(len(requests), dtype=bool)
        bar = tqdm(total=len(requests), desc="sago loglikelihood", disable=disable_tqdm, unit="request")
        for part in passes(groups):
            contexts = [list(g.context) for g in part]
            prefill = self.model.prefill(
                contexts, [g.continuations for g in part], heads=common_heads(contexts)
            )
            for row, group in enumerate(part):
                scored = zip(
                    prefill.continuation_logprobs[row], prefill.continuation_greedy[row], strict=True
                )
                for (logprobs, is_greedy), index in zip(scored, group.pairs, strict=True):
                    loglik[index] = float(logprobs.sum())
                    greedy[index] = is_greedy
            bar.update(sum(len(g.pairs) for g in part))
        bar.close()
        return [(float(v), bool(g)) for v, g in zip(loglik, greedy, strict=True)]

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """Log-likelihood of each whole text: lm-eval's disjoint rolling windows of ``max_length``."""
        from lm_eval import utils

        windows: list[tuple[Any, list[int], list[int]]] = []
        owner: list[int] = []
        for index, request in enumerate(requests):
            (string,) = request.args
            for context, continuation in map(
                utils.make_disjoint_window,
                utils.get_rolling_token_windows(
                    token_list=self.tok_encode(string),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                ),
            ):
                windows.append((None, list(context), list(continuation)))
                owner.append(index)
        scored = self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm)
        totals = np.zeros(len(requests), dtype=np.float64)
        for index, (value, _) in zip(owner, scored, strict=True):
            totals[index] += value
        results = [float(v) for v in totals]
        if self.records is not None:
            self.records.add_rolling(requests, results)
        return results

    # -- generation ---------------------------------------------------------------------------------
    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Greedy continuations cut at the request's stop sequences, as lm-eval ``hf`` returns them."""
        results: list[str] = [""] * len(requests)
        by_kwargs: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            by_kwargs.setdefault(json.dumps(request.args[1], sort_keys=True, default=str), []).append(index)
        bar = tqdm(total=len(requests), desc="sago generate_until", disable=disable_tqdm, unit="request")
        eos = self.tok_decode([self.eot_token_id], skip_special_tokens=False)
        for indices in by_kwargs.values():
            gen_kwargs = dict(requests[indices[0]].args[1])
            kwargs = normalize_gen_kwargs(gen_kwargs, self.max_gen_toks)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            max_gen_toks = int(kwargs.pop("max_gen_toks"))
            if kwargs.get("do_sample") or float(kwargs.get("temperature") or 0.0) > 0.0:
                task = requests[indices[0]].task_name
                raise InputError(
                    f"task {task}: generation_kwargs ask to sample (do_sample/temperature); the sago "
                    "backend decodes greedily"
                )
            room = self.max_length - max_gen_toks
            if room <= 0:
                raise InputError(
                    f"max_gen_toks {max_gen_toks} leaves no room for a context in {self.max_length} positions"
                )
            contexts = [self.tok_encode(requests[i].args[0], left_truncate_len=room) for i in indices]
            settings = GenerationSettings(
                max_new_tokens=max_gen_toks, stop=tuple(s for s in until if s), stop_at_eos=True
            )
            for i, generation in zip(indices, self.model.generate_ids(contexts, settings), strict=True):
                text = self.tok_decode(generation.token_ids)
                results[i] = postprocess_generated_text(text, until, None)
            bar.update(len(indices))
        bar.close()
        if self.records is not None:
            self.records.add_generations(requests, results)
        return results

    def close(self) -> None:
        self.model.close()
