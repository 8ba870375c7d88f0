"""What the axes read (one example's variants) and what they write (item scores)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ExampleOutputs:
    """One example's variants, canonical first. Arrays are indexed by variant (V) then option (K).

    answer: (V,) chosen option (original index); correct: (V,) bool; option_probs: (V, K) content-aligned;
    families: (V,) family names ("canonical" first); meaning_preserving: (V,) bool; option_order: (V, K)
    displayed order (option_order[v, j] = original index shown at position j); hint_index: (V,) original
    index named by a wrong hint, -1 when none; gold: gold option index.
    """

    example_id: str
    gold: int
    answer: np.ndarray
    correct: np.ndarray
    option_probs: np.ndarray
    families: tuple[str, ...]
    meaning_preserving: np.ndarray
    option_order: np.ndarray
    hint_index: np.ndarray

    @property
    def n_options(self) -> int:
        return int(self.option_probs.shape[1])

    def family_mask(self, family: str | None) -> np.ndarray:
        """Canonical + the family's variants (family None: every meaning-preserving variant)."""
        fam = np.asarray(self.families)
        if family is None:
            return self.meaning_preserving.astype(bool)
        return (fam == "canonical") | (fam == family)


@dataclass(frozen=True)
class ItemScore:
    example_id: str
    axis: str
    metric: str
    family: str | None  # None = all meaning-preserving variants
    value: float
