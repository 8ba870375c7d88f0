"""Deterministic variants: family × k for every example, each from its own random stream."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sago_fast.variants.families  # noqa: F401  (registers the families)
from sago_fast.types import Example, Variant
from sago_fast.variants.base import FAMILIES, RenderSpec, derive_rng, spec_params
from sago_fast.variants.render import render

CANONICAL = "canonical"


@dataclass(frozen=True)
class VariantConfig:
    """families: registered names (None = all). k: variants per family per example. seed: stream seed."""

    families: tuple[str, ...] | None = None
    k: int = 2
    seed: int = 0

    def family_names(self) -> tuple[str, ...]:
        names = self.families if self.families is not None else tuple(FAMILIES.names())
        for name in names:
            FAMILIES.get(name)  # unknown names fail here with "did you mean"
        return names


def make_variant(
    example: Example, family: str, k: int, spec: RenderSpec, base: RenderSpec, preserving: bool
) -> Variant:
    return Variant(
        example_id=example.example_id,
        variant_id=f"{example.example_id}/{family}/{k}",
        family=family,
        k=k,
        params=json.dumps(spec_params(spec, base), sort_keys=True),
        is_canonical=family == CANONICAL,
        meaning_preserving=preserving,
        prompt=render(spec),
        option_order=spec.option_order,
        hint_index=spec.hint_index,
    )


def variants_for(example: Example, config: VariantConfig) -> list[Variant]:
    """The canonical variant, then k variants of each applicable family (duplicates of the prompt kept)."""
    base = RenderSpec.canonical(example)
    out = [make_variant(example, CANONICAL, 0, base, base, True)]
    for family in config.family_names():
        perturbation = FAMILIES.get(family)()
        if not perturbation.applies_to(example):
            continue
        for k in range(config.k):
            spec = perturbation.perturb(base, derive_rng(config.seed, example.example_id, family, k))
            out.append(make_variant(example, family, k, spec, base, perturbation.meaning_preserving))
    return out


def generate_variants(examples: Iterable[Example], config: VariantConfig = VariantConfig()) -> list[Variant]:
    out: list[Variant] = []
    for example in examples:
        out.extend(variants_for(example, config))
    return out


def variants_to_jsonl(variants: Sequence[Variant]) -> str:
    """Stable JSONL: one object per variant, keys sorted."""
    from dataclasses import asdict

    return "".join(json.dumps(asdict(v), sort_keys=True, ensure_ascii=False) + "\n" for v in variants)
