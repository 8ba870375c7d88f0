"""The four SAGO axes. Each module turns one example's variant outputs into per-example scores.

Conventions: answers and option distributions are indexed by original option (content), variant 0 of an
example is its canonical variant, and every score is "higher = less stable" except ``swap_consistency``
(share of swaps whose verdict followed the content) and accuracy-like ``worst_case``.
"""

from sago_fast.axes import confidence, generation, mirroring  # noqa: F401  (register their item scorers)
from sago_fast.axes.items import ITEM_SCORERS, ExampleView, ItemScorer, item_scorer, scorers_for
from sago_fast.axes.records import ExampleOutputs, ItemScore

__all__ = [
    "ITEM_SCORERS",
    "ExampleOutputs",
    "ExampleView",
    "ItemScore",
    "ItemScorer",
    "item_scorer",
    "scorers_for",
]
