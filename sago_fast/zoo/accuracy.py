"""The zoo's accuracy table: per checkpoint, suite and template (trained or not)."""

from __future__ import annotations

import os
from typing import Any

from sago_fast.datasets.builtin import SUITES
from sago_fast.zoo.evaluate import evaluate_zoo
from sago_fast.zoo.train import ZooConfig, ZooResult


def accuracy_rows(
    result: ZooResult, config: ZooConfig, n_examples: int, *, cache_dir: str | os.PathLike[str] | None = None
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """(columns, rows) with one row per checkpoint × suite × template, chance level beside accuracy.

    Accuracy is measured on the first ``n_examples`` of each suite, which the zoo was trained on
    (rendered with the trained templates only): the point is stability across renderings, not recall of
    unseen facts.
    """
    rows = []
    for suite in config.suites:
        examples = SUITES.get(suite).build(n_examples, seed=config.seed)
        # generation tasks have no chance level (shown as NULL)
        chance = (
            sum(1 / len(e.options) for e in examples) / len(examples)
            if all(e.options for e in examples)
            else None
        )
        for r in evaluate_zoo(result.checkpoints, examples, config.train_templates, cache_dir=cache_dir):
            rows.append(
                (
                    r.checkpoint,
                    suite,
                    r.template,
                    "yes" if r.trained else "no",
                    round(r.accuracy, 3),
                    None if chance is None else round(chance, 3),
                )
            )
    return ["checkpoint", "suite", "template", "trained", "accuracy", "chance"], rows


def compare_with_shipped(result: ZooResult, config: ZooConfig) -> str:
    """One line: whether a trained reproduction has the shipped checkpoints' weights, byte for byte."""
    from sago_fast.zoo.sources import shipped_zoo

    shipped = shipped_zoo(config)
    if shipped is None:
        return "the package ships no zoo of this configuration to compare with"
    same = [
        (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
        for a, b in zip(result.checkpoints, shipped, strict=True)
    ]
    if all(same):
        return "reproduced: every checkpoint's weights equal the shipped zoo's, byte for byte"
    return (
        f"{same.count(False)} of {len(same)} checkpoints differ from the shipped zoo's weights: training is "
        "reproducible on one machine, not across CPU vendors (MKL and ATen code paths); the demo uses the "
        "shipped zoo"
    )
