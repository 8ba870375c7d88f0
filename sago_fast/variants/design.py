"""Which item × family cells a unit renders: the full design (every applicable family of every item) or a
sampled one (``--design sampled --families-per-item m``).

Under the sampled design every item keeps its canonical rendering (accuracy, and the reference of every
flip) and its non-meaning-preserving families (the wrong hint: the mirroring axis's probe, in no pair
metric), and gets m of its applicable meaning-preserving families, k variants each, drawn without
replacement. The draw is balanced along the visiting order by permuted blocks:

    the items of a stratum (those whose applicable preserving families are the same K), in the seeded
    visiting order (:func:`visiting_rank`), fall into blocks of K; block b has its own seeded random
    permutation sigma_b of the K families, and the q-th item of the block gets families
    sigma_b[(q m + j) mod K] for j < m.

Over a whole block each family is drawn exactly m times, so over any n consecutive items of a stratum the
counts of two families differ by at most 2 (a block's prefix and a block's suffix each differ by at most 1),
and a sequential unit stopped anywhere is balanced too. Each item's m families are a uniformly random
m-subset of its K: a family's inclusion probability is m / K and two families' joint one
m (m - 1) / (K (K - 1)), exactly, whatever the other items. Estimators weight by them
(:func:`sago_fast.axes.scored.pair_inclusion`), so every mean over cells and over pairs of renderings is unbiased for the full
design's value on the same items.

The draw depends on the seed, the example's id and its place among its stratum's items in the visiting
order (sha256 of seed and id): every checkpoint, rerun, resume, shard and Ray task of a dataset gets the
same cells, so comparisons between checkpoints stay paired.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from sago_fast import defaults
from sago_fast.errors import InputError
from sago_fast.types import Variant

DESIGNS = ("full", "sampled")
CANONICAL = "canonical"


@dataclass(frozen=True)
class CellDesign:
    """name: ``full`` (every applicable family) or ``sampled``; families_per_item: m, the meaning-preserving
    families each item gets under ``sampled`` (None: ``defaults.FAMILIES_PER_ITEM``; None under ``full``);
    m_given: whether the user chose m (the default m is not refused where a dataset has fewer families: its
    items then get every family they have)."""

    name: str = "full"
    families_per_item: int | None = None
    m_given: bool = field(default=True, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.name not in DESIGNS:
            raise InputError(f"--design must be one of {', '.join(DESIGNS)}, not {self.name!r}")
        if self.name == "full" and self.families_per_item is not None:
            raise InputError(
                f"--families-per-item {self.families_per_item} needs --design sampled (the full design "
                "renders every applicable family)"
            )
        if self.name == "sampled":
            if self.families_per_item is None:
                object.__setattr__(self, "m_given", False)
            m = defaults.FAMILIES_PER_ITEM if self.families_per_item is None else self.families_per_item
            object.__setattr__(self, "families_per_item", m)
            if m < 1:
                raise InputError(f"--families-per-item must be at least 1, not {m}")

    @property
    def sampled(self) -> bool:
        return self.name == "sampled"

    @property
    def label(self) -> str:
        """``full`` or ``sampled m=3``: how tables and the report name the design."""
        return f"sampled m={self.families_per_item}" if self.sampled else "full"

    def check_families(self, n_families: int, where: str) -> None:
        """One line when m exceeds the meaning-preserving families the run renders (``where`` names them)."""
        m = self.families_per_item
        if self.sampled and self.m_given and m is not None and m > n_families:
            raise InputError(
                f"--families-per-item {m} is more than the {n_families} meaning-preserving families "
                f"{where} applies; use at most {n_families}, or --design full"
            )


def visiting_rank(seed: int, example_id: str) -> str:
    """The key of an example in the seeded visiting order (sequential units visit examples by it)."""
    return hashlib.sha256(f"{seed}:{example_id}".encode()).hexdigest()


def _block_permutation(seed: int, stratum: tuple[str, ...], block: int) -> np.ndarray:
    digest = hashlib.sha256(f"{seed}:{'|'.join(stratum)}:{block}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little")).permutation(len(stratum))


def drawn_families(
    strata: dict[str, tuple[str, ...]], m: int, seed: int
) -> dict[str, tuple[tuple[str, ...], float]]:
    """example id -> (its drawn meaning-preserving families, their inclusion probability).

    strata: example id -> the example's applicable meaning-preserving families (in the run's family
    order). Items with K <= m get all K (probability 1)."""
    by_stratum: dict[tuple[str, ...], list[str]] = {}
    for example_id, families in strata.items():
        by_stratum.setdefault(families, []).append(example_id)
    out: dict[str, tuple[tuple[str, ...], float]] = {}
    for stratum, example_ids in by_stratum.items():
        k = len(stratum)
        if k <= m:
            out.update({e: (stratum, 1.0) for e in example_ids})
            continue
        ordered = sorted(example_ids, key=lambda e: visiting_rank(seed, e))
        for position, example_id in enumerate(ordered):
            block, q = divmod(position, k)
            sigma = _block_permutation(seed, stratum, block)
            chosen = {int(sigma[(q * m + j) % k]) for j in range(m)}
            out[example_id] = (tuple(f for i, f in enumerate(stratum) if i in chosen), m / k)
    return out


def _preserving_families(variants: Sequence[Variant]) -> dict[str, list[str]]:
    """example id -> its rendered meaning-preserving families (canonical left out), in the run's order."""
    strata: dict[str, list[str]] = {}
    for v in variants:
        families = strata.setdefault(v.example_id, [])
        if v.meaning_preserving and not v.is_canonical and v.family not in families:
            families.append(v.family)
    return strata


def most_preserving_families(variants: Sequence[Variant]) -> int:
    """The most meaning-preserving families any one example has (the largest m a sampled design can use)."""
    return max((len(f) for f in _preserving_families(variants).values()), default=0)


def draw_cells(variants: Sequence[Variant], design: CellDesign, seed: int) -> list[Variant]:
    """The variants of the design's cells, in the given order, each with its cell's inclusion probability
    (``Variant.inclusion``). The full design returns ``variants`` unchanged (every probability 1)."""
    if not design.sampled:
        return list(variants)
    assert design.families_per_item is not None
    strata = _preserving_families(variants)
    drawn = drawn_families({e: tuple(f) for e, f in strata.items()}, design.families_per_item, seed)
    out = []
    for v in variants:
        if v.is_canonical or not v.meaning_preserving:
            out.append(v)
            continue
        families, probability = drawn[v.example_id]
        if v.family in families:
            out.append(replace(v, inclusion=probability))
    return out
