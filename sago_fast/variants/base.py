"""A variant is the canonical :class:`RenderSpec` changed by one perturbation family, then rendered.

Structural families change the spec (template, separators, enumerators, option order, hint, shots);
text families change the question text (typos, casing, whitespace, punctuation). Every family is one
small frozen class with a registered ``name``, typed parameters, and a pure ``perturb(spec, rng)``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from sago_fast.registry import Registry
from sago_fast.types import Example
from sago_fast.variants.labels import answer_label


@dataclass(frozen=True)
class RenderSpec:
    """Everything that decides how an example is shown. The default is the canonical rendering."""

    example: Example
    question: str  # question text as shown (text families edit this)
    template: int = 0  # index into the task type's instruction templates
    separator: str = ": "  # between field name and content
    field_case: str = "title"  # title | upper | lower
    enumerator: str = "upper"  # upper "A." | paren "(a)" | number "1)" | roman "i."
    option_order: tuple[int, ...] = ()  # option_order[j] = original index shown at position j
    hint_index: int | None = None  # original option index named by a wrong hint
    shots: tuple[Example, ...] = ()  # demonstrations shown before the question, in this order
    shot_order: tuple[int, ...] = ()  # a benchmark prompt's own demonstrations (its layout's), reordered
    newline: str = "\n"  # line break of the layout (the whitespace family doubles it)
    shot_answer: str = "label"  # how demonstrations show their answer: "label" ("B") or "text" (the option)
    system_prompt: str | None = None  # system turn under a chat template (the system_prompt family)

    @property
    def option_labels(self) -> tuple[str, ...]:
        """The answer label of each displayed position (``A``, ``a``, ``1``, ``i``), see labels.answer_label."""
        return tuple(answer_label(j, self.enumerator) for j in range(len(self.option_order)))

    @classmethod
    def canonical(
        cls, example: Example, shots: tuple[Example, ...] = (), shot_answer: str = "label"
    ) -> RenderSpec:
        return cls(
            example=example,
            question=example.question,
            option_order=tuple(range(len(example.options))),
            shots=shots,
            shot_answer=shot_answer,
        )


@dataclass(frozen=True)
class Perturbation:
    """Base class. Subclasses set ``name``, ``description``, ``example`` and implement ``perturb``."""

    name: ClassVar[str]
    description: ClassVar[str]
    example: ClassVar[str]  # input -> output, shown by `sago variants list`
    meaning_preserving: ClassVar[bool] = True
    tasks: ClassVar[tuple[str, ...]] = ("multiple_choice", "generation", "pairwise")
    needs_chat: ClassVar[bool] = False  # only meaningful when a chat template is applied

    def applies_to(self, example: Example) -> bool:
        return example.task_type in self.tasks

    def perturb(self, spec: RenderSpec, rng: np.random.Generator) -> RenderSpec:
        raise NotImplementedError

    def params(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


FAMILIES: Registry[type[Perturbation]] = Registry("variant family")


def register(cls: type[Perturbation]) -> type[Perturbation]:
    """Class decorator: register a family under its ``name`` (once)."""
    FAMILIES.add(cls.name, cls)
    return cls


def derive_rng(seed: int, example_id: str, family: str, k: int) -> np.random.Generator:
    """The random stream of variant k of ``family`` for ``example_id``: independent of dataset order."""
    digest = hashlib.sha256(f"{seed}\x1f{example_id}\x1f{family}\x1f{k}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def spec_params(spec: RenderSpec, base: RenderSpec) -> dict[str, Any]:
    """The fields of ``spec`` that differ from ``base``: the variant's recorded parameters (JSON-able)."""
    out: dict[str, Any] = {}
    for f in fields(RenderSpec):
        if f.name == "example":
            continue
        value, default = getattr(spec, f.name), getattr(base, f.name)
        if value != default:
            out[f.name] = [s.example_id for s in value] if f.name == "shots" else value
    return json.loads(json.dumps(out))
