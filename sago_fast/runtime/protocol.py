"""What the answering and evaluation code needs of a model (``SagoModel`` is one; tests use fakes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from sago_fast.runtime.batching import BatchPolicy

if TYPE_CHECKING:
    from sago_fast.runtime.model import Prefill


class LanguageModel(Protocol):
    tokenizer: Any  # a transformers tokenizer
    batch_policy: BatchPolicy

    @property
    def max_positions(self) -> int | None: ...

    def tokenize(self, texts: Sequence[str], reserve: int = 0) -> list[list[int]]: ...

    def prefill(self, token_ids: Sequence[Sequence[int]], *options: Any, **named: Any) -> Prefill:
        """One pass over each prompt; ``options`` as :meth:`sago_fast.runtime.model.SagoModel.prefill`
        takes them (continuations, generation, share_keys)."""
        ...

    def target_logprobs(
        self, token_ids: Sequence[Sequence[int]], n_targets: Sequence[int]
    ) -> list[np.ndarray]: ...
