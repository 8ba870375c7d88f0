"""Turn a RenderSpec into prompt text. Canonical layout::

Answer the following multiple-choice question.

Question: What is 2 + 3?
A. 4
B. 5
Answer:

An example with a :class:`~sago_fast.types.PromptLayout` (an ``lmeval:`` task) is rendered in its
benchmark's own prompt wherever the spec asks only for what that prompt can show
(:func:`render_layout`): another question text, the options in another order or with other labels, other
line breaks. The canonical spec gives the benchmark's prompt byte for byte. Other families (instruction
template, field names, demonstrations, hints) render the same question and options in sago's layout.
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


def render_layout(spec: RenderSpec) -> str | None:
    """``spec`` in its example's own prompt layout, or None when it has none or cannot show what
    ``spec`` asks for."""
    layout = spec.example.layout
    if layout is None:
        return None
    identity = spec.option_order == tuple(range(len(spec.option_order)))
    if (
        spec.template != 0
        or spec.separator != ": "
        or spec.field_case != "title"
        or spec.hint_index is not None
        or spec.shots
        or (not identity and not layout.options)
        or (spec.enumerator != "upper" and not layout.labels)
    ):
        return None
    example = spec.example
    swaps = [(layout.question, spec.question)]
    swaps += [(span, example.options[spec.option_order[j]]) for j, span in enumerate(layout.options)]
    swaps += [(span, answer_label(j, spec.enumerator)) for j, span in enumerate(layout.labels)]
    text, parts, at = layout.text, [], 0
    for (start, end), new in sorted(swaps, key=lambda swap: swap[0]):
        parts += [text[at:start].replace("\n", spec.newline), new]
        at = end
    parts.append(text[at:].replace("\n", spec.newline))
    return "".join(parts)


def render(spec: RenderSpec) -> str:
    own = render_layout(spec)
    if own is not None:
        return own
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
