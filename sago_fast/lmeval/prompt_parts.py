"""Taking an lm-eval prompt apart: where the question, the options and their labels, the field names, the
instruction and the demonstrations stand in the text lm-eval built (:class:`~sago_fast.types.PromptLayout`),
so that each variant family changes its own part (:func:`sago_fast.variants.render.render_layout`).

The options and the question are searched in the document's own turn (after any demonstrations), the
field names there and at line starts elsewhere; spans are (start, end) character offsets of the prompt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from sago_fast.errors import InputError
from sago_fast.types import Example

LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


FIELD = re.compile(r"(?m)^[ \t]*([A-Za-z]+(?: [A-Za-z]+){0,2}):(?=\s|$)")  # "Question:", "Answer:" ...


def _outside(span: tuple[int, int], taken: Sequence[tuple[int, int]]) -> bool:
    return all(span[1] <= start or end <= span[0] for start, end in taken)


def field_spans(text: str, final: int, taken: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Where the field names stand: the names ending a line's first words with ``:`` in the document's own
    turn (from ``final``), outside the ``taken`` spans (question, options, labels, instruction), and the
    same names at the start of lines elsewhere (the demonstrations')."""
    found = [m for m in FIELD.finditer(text) if _outside((m.start(1), m.end(1) + 1), taken)]
    names = {m.group(1) for m in found if m.start(1) >= final}
    return tuple(m.span(1) for m in found if m.group(1) in names)


def with_parts(example: Example, turns: Sequence[str], shots: int) -> Example:
    """``example`` with its layout's instruction, demonstrations and field names found (see
    :class:`~sago_fast.types.PromptLayout`), from the turns lm-eval built its prompt from."""
    layout = example.layout
    assert layout is not None
    text = layout.text
    instruction, final = (0, 0), 0
    shot_spans: tuple[tuple[int, int], ...] = ()
    if turns:
        at = len(text) - len("".join(turns))
        if text[:at].strip():
            instruction = (0, len(text[:at].rstrip()))
        starts = [at + sum(len(t) for t in turns[:i]) for i in range(len(turns) + 1)]
        shot_spans = tuple((starts[i], starts[i + 1]) for i in range(shots))
        final = starts[shots]
    taken = [layout.question, *layout.options, *layout.labels, instruction]
    fields = field_spans(text, final, taken)
    cue = text[fields[-1][0] : fields[-1][1]] if fields and not text[fields[-1][1] + 1 :].strip() else None
    labels = shot_labels(text, shot_spans, len(layout.labels), cue) if layout.labels else ()
    found = replace(layout, fields=fields, instruction=instruction, shots=shot_spans, shot_labels=labels)
    return replace(example, layout=found)


def shot_labels(
    text: str, shots: Sequence[tuple[int, int]], n: int, cue: str | None
) -> tuple[tuple[int, int], ...]:
    """Where the demonstrations' letters stand: their options' labels (lines ``A. text``, as the
    document's ``n``) and the letter each answers with after the answer cue ``cue:``."""
    spans: list[tuple[int, int]] = []
    for start, end in shots:
        block = text[start:end]
        listed = labelled_options(block, n)
        if listed is None:
            continue
        spans += [(start + a, start + b) for a, b in listed[0]]
        answers = (
            list(re.finditer(rf"(?m)^[ \t]*{re.escape(cue)}:[ \t]*([A-Z])[ \t]*$", block)) if cue else []
        )
        if answers and LABELS.index(answers[-1].group(1)) < n:
            spans.append((start + answers[-1].start(1), start + answers[-1].end(1)))
    return tuple(sorted(spans))


def labelled_options(
    prompt: str, n: int, at: int = 0
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]] | None:
    """(label spans, option text spans) of lines ``A. text`` ... for the first ``n`` letters, in order
    (``A.``, ``A)`` or ``A:``) from offset ``at``, or None when the prompt does not list them so."""
    labels, options = [], []
    for j in range(n):
        found = re.compile(rf"(?m)^({LABELS[j]})[.):] +(\S[^\n]*)$").search(prompt, at)
        if found is None:
            return None
        labels.append(found.span(1))
        options.append(found.span(2))
        at = found.end()
    return labels, options


def shown_options(prompt: str, choices: Sequence[str], at: int = 0) -> list[tuple[int, int]] | None:
    """Where each choice stands in the prompt from offset ``at``, in order, each once; None when they do
    not all."""
    spans = []
    for choice in choices:
        if not choice.strip() or prompt.count(choice, at) != 1:
            return None
        start = prompt.find(choice, at)  # found: it stands there once
        spans.append((start, start + len(choice)))
        at = start + len(choice)
    return spans


def question_span(prompt: str, doc: Any, before: int, where: str, after: int = 0) -> tuple[int, int]:
    """Where the document's question stands: the longest string field of ``doc`` found in ``prompt``
    between offsets ``after`` and ``before`` (its last occurrence there; stripped as templates strip it)."""
    best: tuple[int, int] | None = None
    fields = doc.items() if isinstance(doc, Mapping) else []
    for _, value in fields:
        if not isinstance(value, str) or not value.strip():
            continue
        text = value.strip()
        start = prompt.rfind(text, after, before)
        if start >= 0 and start + len(text) <= before and (best is None or len(text) > best[1] - best[0]):
            best = (start, start + len(text))
    if best is None:
        names = ", ".join(str(k) for k, v in fields if isinstance(v, str)) or "none"
        raise InputError(
            f"{where}: field 'doc_to_text': no text field of the document ({names}) stands in the prompt "
            "as its question, so sago cannot take the prompt apart"
        )
    return best
