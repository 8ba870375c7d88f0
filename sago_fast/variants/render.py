"""Turn a RenderSpec into prompt text. Canonical layout::

Answer the following multiple-choice question.

Question: What is 2 + 3?
A. 4
B. 5
Answer:

An example with a :class:`~sago_fast.types.PromptLayout` (an ``lmeval:`` task) is rendered in its
benchmark's own prompt (:func:`render_layout`): each family changes its part of that prompt (the question
text, the options' order and labels, field names and separators, the instruction, a hint before the answer
cue, the demonstrations' order, line breaks) and leaves the rest as the benchmark wrote it. The canonical
spec gives the benchmark's prompt byte for byte. Only sago's own demonstrations (``--num-fewshot`` on such
a task) render the question and options in sago's layout.
"""

from __future__ import annotations

from sago_fast.types import Example, PromptLayout
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


def render_layout(spec: RenderSpec) -> tuple[str, int] | None:
    """``spec`` in its example's own prompt layout (:class:`~sago_fast.types.PromptLayout`) and the length
    of its *head* (the instruction and demonstrations before the document's own turn, as rendered; 0 in a
    0-shot prompt), or None when it has no layout or cannot show what ``spec`` asks for (sago's own
    demonstrations; option labels or another option order in a prompt that shows none).

    Each family changes its part of the benchmark's prompt and nothing else: the question's text, the
    options' order and labels, the field names' case and separator (``Question:``, ``Answer:``, the
    demonstrations' too), the instruction (the task's description, or one put first where it has none),
    a wrong hint on its own line before the answer cue, the demonstrations' order, the line breaks."""
    layout = spec.example.layout
    if layout is None or spec.shots:
        return None
    identity = spec.option_order == tuple(range(len(spec.option_order)))
    if (not identity and not layout.options) or (spec.enumerator != "upper" and not layout.labels):
        return None
    text = layout.text
    swaps = _layout_swaps(spec, layout)
    if not layout.shots:
        return _swapped(text, (0, len(text)), swaps, spec.newline), 0
    lo, hi = layout.shots[0][0], layout.shots[-1][1]
    regions = [(0, lo), *layout.shots, (hi, len(text))]  # in the text's order
    placed: dict[tuple[int, int], list[Swap]] = {r: [] for r in regions}
    for swap in swaps:  # each in the first region that holds it (a point between two: the first's end)
        (start, end), _ = swap
        placed[next(r for r in regions if r[0] <= start and end <= r[1])].append(swap)
    order = spec.shot_order or tuple(range(len(layout.shots)))
    shown = [regions[0], *(layout.shots[i] for i in order), regions[-1]]
    parts = [_swapped(text, r, placed[r], spec.newline) for r in shown]
    return "".join(parts), sum(len(part) for part in parts[:-1])


Swap = tuple[tuple[int, int], str]  # (span of the layout's text, what stands there instead)


def _layout_swaps(spec: RenderSpec, layout: PromptLayout) -> list[Swap]:
    example, text = spec.example, layout.text
    swaps = [(layout.question, spec.question)]
    swaps += [(span, example.options[spec.option_order[j]]) for j, span in enumerate(layout.options)]
    swaps += [(span, answer_label(j, spec.enumerator)) for j, span in enumerate(layout.labels)]
    letters = [(span, ord(text[span[0]]) - ord("A")) for span in layout.shot_labels]  # "A" -> 0
    swaps += [(span, answer_label(j, spec.enumerator)) for span, j in letters]
    for start, end in layout.fields:
        name = text[start:end]
        swaps.append(
            ((start, end), name if spec.field_case == "title" else field_name(name, spec.field_case))
        )
        spaced = text[end + 1 : end + 2] == " "  # "Question: text" (the separator) or "Answer:" (the cue)
        swaps.append(((end, end + 1 + spaced), spec.separator if spaced else spec.separator.rstrip()))
    if spec.template != 0:  # a cloze prompt (no options shown) is worded as a question to answer
        templates = TEMPLATES[example.task_type if layout.options else "generation"]
        instruction = templates[spec.template % len(templates)]
        swaps.append((layout.instruction, instruction + ("" if layout.instruction[1] else "\n\n")))
    if spec.hint_index is not None:
        shown = spec.option_order.index(spec.hint_index)
        named = answer_label(shown, spec.enumerator) if layout.labels else example.options[spec.hint_index]
        hint = f"I think the answer is {named}, but I'm not sure."
        at, before_cue = _hint_point(layout)
        swaps.append(((at, at), f"\n{hint}\n" if before_cue else f"\n\n{hint}"))
    return swaps


def _hint_point(layout: PromptLayout) -> tuple[int, bool]:
    """Where a wrong hint goes: (offset, True) at the start of the answer cue's line (the last field name,
    nothing but spaces after its ``:``), else (offset, False) at the end of the last option's line (the
    question's, when no option is shown)."""
    text = layout.text
    if layout.fields:
        start, end = layout.fields[-1]
        if not text[end + 1 :].strip() and start >= layout.question[1]:
            return text.rfind("\n", 0, start) + 1, True
    last = layout.options[-1][1] if layout.options else layout.question[1]
    line_end = text.find("\n", last)
    return (len(text) if line_end < 0 else line_end), False


def _swapped(text: str, region: tuple[int, int], swaps: list[Swap], newline: str) -> str:
    """``text`` over ``region`` with ``swaps`` (all within it) made, its own line breaks as ``newline``."""
    parts, at = [], region[0]
    for (start, end), new in sorted(swaps, key=lambda swap: swap[0]):
        parts += [text[at:start].replace("\n", newline), new]
        at = end
    parts.append(text[at : region[1]].replace("\n", newline))
    return "".join(parts)


def render(spec: RenderSpec) -> str:
    return render_with_head(spec)[0]


def render_with_head(spec: RenderSpec) -> tuple[str, int]:
    """The prompt, and how many of its first characters are its head: the part that renderings of other
    examples may share by design (a benchmark's instruction and demonstrations, see :func:`render_layout`;
    0 in sago's own layout)."""
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
    return (nl + nl).join(parts) + nl + answer_cue, 0
