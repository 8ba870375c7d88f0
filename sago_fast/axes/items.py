"""Per-example axis scorers, registered like perturbation families and kernels.

An axis module registers one :class:`ItemScorer` per group of metrics it computes from one example's
variants; the run hub (:mod:`sago_fast.units.chunk`) calls every scorer registered for the example's
task type and writes what it returns to ``item_scores``. Every metric a scorer writes must be in the
metric catalogue (:mod:`sago_fast.axes.catalogue`), which the hub checks; a scorer declares its metrics
on its decorator (``metrics=``). Adding a metric therefore touches its axis module only (and the
README's table; "Adding a metric").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sago_fast.axes.catalogue import MetricSpec, declare
from sago_fast.axes.scored import ExampleOutputs, ItemScore
from sago_fast.registry import Registry
from sago_fast.types import TASK_TYPES


@dataclass(frozen=True)
class ExampleView:
    """Everything a scorer may read about one example's variants (canonical first, V variants).

    outputs: answers, correctness and option distributions (:class:`ExampleOutputs`);
    families: the families to score: None (all meaning-preserving variants) then each family;
    next_token_probs: (V, vocab) next-token distribution at the answer position;
    p_gold: (V,) P(reference answer) of generation tasks, None with options (the gold option's probability);
    texts: generation tasks: the generated text's token ids per variant, else None;
    prompts: the rendered prompt per variant.
    """

    outputs: ExampleOutputs
    families: list[str | None]
    next_token_probs: np.ndarray
    p_gold: np.ndarray | None
    texts: Sequence[Sequence[int]] | None
    prompts: Sequence[str]


@dataclass(frozen=True)
class ItemScorer:
    """One group of per-example metrics of one axis, for the task types it applies to."""

    axis: str
    score: Callable[[ExampleView], list[ItemScore]]
    tasks: tuple[str, ...] = TASK_TYPES


ITEM_SCORERS: Registry[ItemScorer] = Registry("item scorer")


def item_scorer(
    name: str, axis: str, tasks: tuple[str, ...] = TASK_TYPES, metrics: Sequence[MetricSpec] = ()
) -> Callable:
    """Decorator registering ``fn(view) -> list[ItemScore]`` as the item scorer ``name``, and declaring
    the metrics it writes (``metrics``: their catalogue entries, filed under ``axis``)."""

    def add(fn: Callable[[ExampleView], list[ItemScore]]) -> Callable[[ExampleView], list[ItemScore]]:
        ITEM_SCORERS.add(name, ItemScorer(axis, fn, tasks))
        declare(axis, metrics)
        return fn

    return add


def scorers_for(task_type: str) -> list[ItemScorer]:
    """The registered scorers that apply to ``task_type``, in name order."""
    return [s for s in (ITEM_SCORERS.get(n) for n in ITEM_SCORERS.names()) if task_type in s.tasks]
