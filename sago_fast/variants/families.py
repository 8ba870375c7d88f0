"""The registered perturbation families. Each docstring-free class carries its input→output example."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from sago_fast.types import Example
from sago_fast.variants.base import Perturbation, RenderSpec, register
from sago_fast.variants.render import TEMPLATES

MC = ("multiple_choice",)
WITH_OPTIONS = ("multiple_choice", "pairwise")


def _shows_options(example: Example) -> bool:
    """Whether the example's prompt lists its options (sago's layout always does; a benchmark's may not:
    a cloze task's choices only follow the prompt)."""
    return example.layout is None or bool(example.layout.options)


def _choose_other(rng: np.random.Generator, choices: tuple[str, ...], current: str) -> str:
    others = [c for c in choices if c != current]
    return others[int(rng.integers(len(others)))]


@register
@dataclass(frozen=True)
class Template(Perturbation):
    name: ClassVar[str] = "template"
    description: ClassVar[str] = "rewords the instruction with another hand-written template of the task"
    example: ClassVar[str] = (
        "'Answer the following multiple-choice question.' -> 'Choose the correct option.'"
    )

    def perturb(self, spec: RenderSpec, rng: np.random.Generator) -> RenderSpec:
        n = len(TEMPLATES[spec.example.task_type])
        return replace(spec, template=int(rng.integers(1, n)))


@register
@dataclass(frozen=True)
class Separator(Perturbation):
    name: ClassVar[str] = "separator"
    description: ClassVar[str] = "changes the separator between field names and content"
    example: ClassVar[str] = "'Question: What is 2 + 3?' -> 'Question - What is 2 + 3?'"
    choices: tuple[str, ...] = (" - ", " = ", ":\n", " :: ", " | ")

    def perturb(self, spec: RenderSpec, rng: np.random.Generator) -> RenderSpec:
        return replace(spec, separator=_choose_other(rng, self.choices, spec.separator))


@register
@dataclass(frozen=True)
class FieldCase(Perturbation):
    name: ClassVar[str] = "field_case"
    description: ClassVar[str] = "changes the casing of field names"
    example: ClassVar[str] = "'Question: ... Answer:' -> 'QUESTION: ... ANSWER:'"

    def perturb(self, spec: RenderSpec, rng: np.random.Generator) -> RenderSpec:
        return replace(spec, field_case=_choose_other(rng, ("title", "upper", "lower"), spec.field_case))


@register
@dataclass(frozen=True)
class Enumerator(Perturbation):
    name: ClassVar[str] = "enumerator"
    description: ClassVar[str] = "changes the option labels (A. / (a) / 1) / i.)"
    example: ClassVar[str] = "'A. 4\\nB. 5' -> '(a) 4\\n(b) 5'"
    tasks: ClassVar[tuple[str, ...]] = WITH_OPTIONS

    def applies_to(self, example: Example) -> bool:  # a benchmark's prompt: only where it labels options
        return super().applies_to(example) and (example.layout is None or bool(example.layout.labels))

    def perturb(self, spec: RenderSpec, rng: np.random.Generator) -> RenderSpec:
        return replace(
            spec, enumerator=_choose_other(rng, ("upper", "paren", "number", "roman"), spec.enumerator)
        )


@register
@dataclass(frozen=True)
class OptionPermutation(Perturbation):
    name: ClassVar[str] = "option_permutation"
    description: ClassVar[str] = "shuffles the options so that the gold answer moves (order recorded)"
    example: ClassVar[str] = "'A. 4\\nB. 5\\nC. 6' (gold B) -> 'A. 5\\nB. 6\\nC. 4' (gold A)"
    tasks: ClassVar[tuple[str, ...]] = MC

    def applies_to(self, example: Example) -> bool:  # a benchmark's prompt: only where it shows options
        return super().applies_to(example) and _shows_options(example)

    def perturb(self, spec: RenderSpec, rng: np.random.Generator) -> RenderSpec:
        gold = spec.example.answer_index
        if gold is None or len(spec.option_order) < 2:
            return spec
        order = list(spec.option_order)
        while True:
            perm = [order[i] for i in rng.permutation(len(order))]
            if perm.index(gold) != order.index(gold):
                return replace(spec, option_order=tuple(perm))


@register
@dataclass(frozen=True)
class PairSwap(Perturbation):
    name: ClassVar[str] = "pair_swap"
    description: ClassVar[str] = (
        "swaps the two items of a pairwise example (the verdict must follow the content)"
    )
    example: ClassVar[str] = "'A. 41\\nB. 14' -> 'A. 14\\nB. 41'"
    tasks: ClassVar[tuple[str, ...]] = ("pairwise",)

    def applies_to(self, example: Example) -> bool:
        return super().applies_to(example) and _shows_options(example)

    def perturb(self, spec: RenderSpec, rng: np.random.Generator) -> RenderSpec:
        return replace(spec, option_order=tuple(reversed(spec.option_order)))


@register
@dataclass(frozen=True)
class WrongHint(Perturbation):
    name: ClassVar[str] = "wrong_hint"
    description: ClassVar[str] = (
        "adds 'I think the answer is X' naming a wrong option (not meaning preserving)"
    )
    example: ClassVar[str] = "'...B. 5' -> '...B. 5\\n\\nI think the answer is A, but I'm not sure.'"
    meaning_preserving: ClassVar[bool] = False
    tasks: ClassVar[tuple[str, ...]] = WITH_OPTIONS

    def perturb(self, spec: RenderSpec, rng: np.random.Generator) -> RenderSpec:
        wrong = [i for i in range(len(spec.example.options)) if i != spec.example.answer_index]
        return replace(spec, hint_index=wrong[int(rng.integers(len(wrong)))])


def _words(text: str) -> list[str]:
    return text.split(" ")


@register
@dataclass(frozen=True)
class Typo(Perturbation):
    name: ClassVar[str] = "typo"
    description: ClassVar[str] = "swaps two adjacent letters in some words of the question"
    example: ClassVar[str] = "'Which is larger, 41 or 14?' -> 'Which is lagrer, 41 or 14?'"
    rate: float = 0.15

    def perturb(self, spec: RenderSpec, rng: np.random.Generator) -> RenderSpec:
        words = _words(spec.question)
        candidates = [i for i, w in enumerate(words) if sum(c.isalpha() for c in w) >= 4]
        if not candidates:
            return spec
        chosen = [i for i in candidates if rng.random() < self.rate] or [
            candidates[int(rng.integers(len(candidates)))]
        ]
        for i in chosen:
            word = words[i]
            letters = [
                j
                for j in range(len(word) - 1)
                if word[j].isalpha() and word[j + 1].isalpha() and word[j] != word[j + 1]
            ]
            if letters:
                j = letters[int(rng.integers(len(letters)))]
                words[i] = word[:j] + word[j + 1] + word[j] + word[j + 2 :]
        return replace(spec, question=" ".join(words))


@register
@dataclass(frozen=True)
class Casing(Perturbation):
    name: ClassVar[str] = "casing"
    description: ClassVar[str] = "lower-cases or upper-cases the question"
    example: ClassVar[str] = "'Which is larger, 41 or 14?' -> 'WHICH IS LARGER, 41 OR 14?'"

    def perturb(self, spec: RenderSpec, rng: np.random.Generator) -> RenderSpec:
        text = spec.question.upper() if rng.random() < 0.5 else spec.question.lower()
        if text == spec.question:
            text = spec.question.swapcase()
        return replace(spec, question=text)


@register
@dataclass(frozen=True)
class Whitespace(Perturbation):
    name: ClassVar[str] = "whitespace"
    description: ClassVar[str] = "doubles spaces between words and adds blank lines in the layout"
    example: ClassVar[str] = "'What is 2 + 3?' -> 'What  is 2  + 3?'"
    rate: float = 0.3

    def perturb(self, spec: RenderSpec, rng: np.random.Generator) -> RenderSpec:
        words = _words(spec.question)
        gaps = [" " * (2 if rng.random() < self.rate else 1) for _ in words[1:]]
        if len(words) > 1 and all(g == " " for g in gaps):
            gaps[int(rng.integers(len(gaps)))] = "  "
        text = words[0] + "".join(g + w for g, w in zip(gaps, words[1:], strict=True))
        newline = "\n\n" if rng.random() < 0.5 else "\n"
        return replace(spec, question=text, newline=newline)


@register
@dataclass(frozen=True)
class Punctuation(Perturbation):
    name: ClassVar[str] = "punctuation"
    description: ClassVar[str] = "drops or changes the question's final punctuation and removes commas"
    example: ClassVar[str] = "'Which is larger, 41 or 14?' -> 'Which is larger 41 or 14'"

    def perturb(self, spec: RenderSpec, rng: np.random.Generator) -> RenderSpec:
        text = spec.question.rstrip()
        body, end = (text[:-1], text[-1]) if text and text[-1] in "?.!" else (text, "")
        if rng.random() < 0.5:
            body = body.replace(",", "")
        ending = ("", "??", " ?", ".")[int(rng.integers(4))]
        result = body + ending
        if result == text:
            result = body + ("" if end else "?")
        return replace(spec, question=result)


DEMONSTRATIONS: dict[str, tuple[Example, ...]] = {
    "multiple_choice": (
        Example("demo-mc-1", "multiple_choice", "What is 1 + 1?", ("3", "2", "1"), 1),
        Example("demo-mc-2", "multiple_choice", "Which word is a colour?", ("red", "run", "rain"), 0),
        Example("demo-mc-3", "multiple_choice", "Which number is even?", ("7", "9", "4"), 2),
    ),
    "pairwise": (
        Example("demo-pw-1", "pairwise", "Which is larger?", ("3", "8"), 1),
        Example("demo-pw-2", "pairwise", "Which comes first in the alphabet?", ("b", "a"), 1),
        Example("demo-pw-3", "pairwise", "Which is heavier?", ("a truck", "a feather"), 0),
    ),
    "generation": (
        Example("demo-gen-1", "generation", "What is 2 + 2?", answers=("4",)),
        Example("demo-gen-2", "generation", "Reverse the word 'ab'.", answers=("ba",)),
        Example("demo-gen-3", "generation", "What is the capital of Italy?", answers=("Rome",)),
    ),
}


@register
@dataclass(frozen=True)
class FewshotOrder(Perturbation):
    name: ClassVar[str] = "fewshot_order"
    description: ClassVar[str] = (
        "permutes the demonstrations (those of --num-fewshot or of an lm-eval task's prompt, else three "
        "built-in ones); variants differ only in their order"
    )
    example: ClassVar[str] = "'Question: ...' -> 'Question: What is 1 + 1? ... Answer: B\\n\\nQuestion: ...'"

    def applies_to(self, example: Example) -> bool:  # a benchmark's prompt: its own demonstrations
        return super().applies_to(example) and (example.layout is None or len(example.layout.shots) > 1)

    def perturb(self, spec: RenderSpec, rng: np.random.Generator) -> RenderSpec:
        layout = spec.example.layout
        if layout is not None and not spec.shots:
            order = rng.permutation(len(layout.shots))
            if (order == np.arange(len(order))).all():
                order = np.roll(order, 1)
            return replace(spec, shot_order=tuple(int(i) for i in order))
        demos = spec.shots or DEMONSTRATIONS[spec.example.task_type]
        order = rng.permutation(len(demos))
        if spec.shots and len(demos) > 1 and (order == np.arange(len(demos))).all():
            order = np.roll(order, 1)  # the data's own demonstrations: never the canonical order again
        return replace(spec, shots=tuple(demos[i] for i in order))


SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "You are a knowledgeable assistant. Answer the question accurately.",
    "You are an AI assistant that answers questions.",
    "Answer the user's question.",
)


@register
@dataclass(frozen=True)
class SystemPrompt(Perturbation):
    name: ClassVar[str] = "system_prompt"
    description: ClassVar[str] = (
        "puts one of a few neutral system prompts in the chat template's system turn "
        "(only with --chat-template auto)"
    )
    example: ClassVar[str] = "system: (template default) -> system: 'You are a helpful assistant.'"
    needs_chat: ClassVar[bool] = True
    choices: tuple[str, ...] = SYSTEM_PROMPTS

    def perturb(self, spec: RenderSpec, rng: np.random.Generator) -> RenderSpec:
        return replace(spec, system_prompt=_choose_other(rng, self.choices, spec.system_prompt or ""))
