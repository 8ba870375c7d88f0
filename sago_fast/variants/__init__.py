"""Variant engine: registered perturbation families and deterministic generation of variants."""

from sago_fast.variants.base import FAMILIES, Perturbation, RenderSpec
from sago_fast.variants.generate import VariantConfig, generate_variants

__all__ = ["FAMILIES", "Perturbation", "RenderSpec", "VariantConfig", "generate_variants"]
