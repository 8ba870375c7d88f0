"""What the answering and evaluation code needs of a model (``SagoModel`` is one; tests use fakes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from sago_fast.runtime.batching import BatchPolicy

if TYPE_CHECKING:
    from sago_fast.runtime.decode import GenerationSettings
    from sago_fast.runtime.model import Prefill


class LanguageModel(Protocol):
    tokenizer: Any  # a transformers tokenizer

    @property
    def max_positions(self) -> int | None: ...

    @property
    def batch_policy(self) -> BatchPolicy: ...

    def configured(self, **engine_settings: Any) -> LanguageModel:
        """The same model run with another ``batch_policy`` (or progress); nothing changes on this one."""
        ...

    def tokenize(self, texts: Sequence[str], reserve: int = 0) -> list[list[int]]: ...

    def prefill(
        self,
        token_ids: Sequence[Sequence[int]],
        continuations: Sequence[Sequence[Sequence[int]]] | None = None,
        generation: GenerationSettings | None = None,
        share_keys: Sequence[str] | None = None,
        heads: Sequence[int] | None = None,
    ) -> Prefill:
        """One pass over each prompt, and what is built on its cache (:meth:`sago_fast.runtime.model.SagoModel.prefill`)."""
        ...

    def target_logprobs(
        self, token_ids: Sequence[Sequence[int]], n_targets: Sequence[int]
    ) -> list[np.ndarray]: ...
