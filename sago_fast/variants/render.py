"""Turn a RenderSpec into prompt text. Canonical layout::

Answer the following multiple-choice question.

Question: What is 2 + 3?
A. 4
B. 5
Answer:
"""

from __future__ import annotations

from sago_fast.types import Example
from sago_fast.variants.base import RenderSpec
from sago_fast.variants.labels import answer_label, option_label

TEMPLATES: dict[str, tuple[str, ...]] = {
    "multiple_choice": (
        "Answer the following multiple-choice question.",
        "Choose the correct option.",
        "Pick the right answer from the choices below.",
        "Read the question and select the best answer.",
        "Which of the options answers the question?",
    ),
    "pairwise": (
        "Compare the two items and answer the question.",
        "Look at both items, then answer.",
        "Decide between the two items.",
        "Read the two items and pick one.",
    ),
    "generation": (
        "Answer the question.",
        "Respond with the answer only.",
        "Give a short answer.",
        "Reply to the following.",
    ),
}


def field_name(name: str, case: str) -> str:
    return {"title": name.title(), "upper": name.upper(), "lower": name.lower()}[case]


def _block(
    example: Example, question: str, spec: RenderSpec, order: tuple[int, ...], answer: bool
) -> list[str]:
    nl = spec.newline
    lines = [f"{field_name('question', spec.field_case)}{spec.separator}{question}"]
    for position, original in enumerate(order):
        lines.append(f"{option_label(position, spec.enumerator)} {example.options[original]}")
    if answer:
        if not example.has_options:
            gold = example.answers[0]
        elif spec.shot_answer == "text":
            gold = example.options[example.answer_index]  # type: ignore[index]
        else:
            gold = answer_label(order.index(example.answer_index), spec.enumerator)
        lines.append(f"{field_name('answer', spec.field_case)}{spec.separator}{gold}")
    return [nl.join(lines)]


def render(spec: RenderSpec) -> str:
    example = spec.example
    templates = TEMPLATES[example.task_type]
    parts = [templates[spec.template % len(templates)]]
    for shot in spec.shots:
        parts += _block(shot, shot.question, spec, tuple(range(len(shot.options))), answer=True)
    body = _block(example, spec.question, spec, spec.option_order, answer=False)
    if spec.hint_index is not None:
        label = option_label(spec.option_order.index(spec.hint_index), spec.enumerator)
        body.append(f"I think the answer is {label.rstrip('.')}, but I'm not sure.")
    parts += body
    nl = spec.newline
    answer_cue = f"{field_name('answer', spec.field_case)}{spec.separator.rstrip()}"
    return (nl + nl).join(parts) + nl + answer_cue
