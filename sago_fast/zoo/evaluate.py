"""Accuracy of zoo checkpoints per instruction template, through ONNX (``load_model`` + option scoring, or
greedy generation for generation tasks)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from sago_fast.types import Example
from sago_fast.variants.base import RenderSpec
from sago_fast.variants.generate import make_variant
from sago_fast.variants.render import TEMPLATES


@dataclass(frozen=True)
class TemplateAccuracy:
    checkpoint: str
    template: int
    trained: bool
    accuracy: float  # share of examples answered correctly (option scoring / normalised exact match)
    n_examples: int


def template_accuracy(model, examples: Sequence[Example], template: int) -> float:
    """Accuracy of the canonical rendering with instruction ``template``: lm-eval-style option scoring
    (argmax over options of loglik(prompt, " " + option); ties → lowest index) for tasks with options,
    greedy generation + normalised exact match for generation tasks (as in ``sago run``)."""
    from sago_fast.answers.answering import answer_all
    from sago_fast.runtime.decode import GenerationSettings

    variants = []
    for example in examples:
        base = RenderSpec.canonical(example)
        variants.append(
            make_variant(example, "template", template, replace(base, template=template), base, True)
        )
    token_ids = model.tokenizer([v.prompt for v in variants], add_special_tokens=True)["input_ids"]
    answers = answer_all(model, examples, variants, token_ids, GenerationSettings())
    return float(np.mean([a.correct for a in answers]))


def evaluate_zoo(
    checkpoints: Sequence[str | os.PathLike[str]],
    examples: Sequence[Example],
    trained_templates: Sequence[int],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
) -> list[TemplateAccuracy]:
    import sago_fast

    n_templates = min(len(TEMPLATES[e.task_type]) for e in examples)
    rows = []
    for checkpoint in checkpoints:
        with sago_fast.load_model(checkpoint, cache_dir=cache_dir) as model:
            for template in range(n_templates):
                acc = template_accuracy(model, examples, template)
                rows.append(
                    TemplateAccuracy(
                        Path(checkpoint).name, template, template in trained_templates, acc, len(examples)
                    )
                )
    return rows
