"""The four SAGO axes. Each axis module registers scorers at the levels it needs (:mod:`items` per
example, :mod:`levels` per layer and per dataset); the run hub calls every registered scorer.

Conventions: answers and option distributions are indexed by original option (content), variant 0 of an
example is its canonical variant, and every score is "higher = less stable" except ``swap_consistency``
(share of swaps whose verdict followed the content) and accuracy-like ``worst_case``.
"""

from sago_fast.axes import activation, confidence, generation, mirroring  # noqa: F401  (register their scorers)
from sago_fast.axes.items import ITEM_SCORERS, ExampleView, ItemScorer, item_scorer, scorers_for
from sago_fast.axes.levels import (
    DATASET_SCORERS,
    LAYER_SCORERS,
    ActivationBlock,
    ChunkView,
    UnitContext,
    dataset_scorer,
    layer_scorer,
)
from sago_fast.axes.scored import DatasetScore, Estimator, ExampleOutputs, ItemScore, LayerScores, ScoredRows

__all__ = [
    "DATASET_SCORERS",
    "ITEM_SCORERS",
    "LAYER_SCORERS",
    "ActivationBlock",
    "ChunkView",
    "DatasetScore",
    "Estimator",
    "ExampleOutputs",
    "ExampleView",
    "ItemScore",
    "ItemScorer",
    "LayerScores",
    "ScoredRows",
    "UnitContext",
    "dataset_scorer",
    "item_scorer",
    "layer_scorer",
    "scorers_for",
]
