"""Readers for benchmarks as their authors publish them, chosen by a prefix (``mmlu:path``) or by shape.

Each format turns one source record into an :class:`~sago_fast.types.Example`, validating it; the first
problem is one line naming file, line and field, and nothing is returned. Source ids are kept where the
format has them (else ``<file stem>-<line>``).

| format | records | example |
| --- | --- | --- |
| mmlu | CSV rows without header: question, A, B, C, D, answer letter | 4-option multiple choice |
| arc | JSONL: id, question.stem, question.choices[{label, text}], answerKey | 3-5 options |
| hellaswag | JSONL: ctx (or ctx_a + ctx_b), endings, label (+ activity_label, ind) | 4 endings, lm-eval clean-up |
| piqa | JSONL: goal, sol1, sol2 + labels in ``<stem>-labels.lst`` beside it | 2 options |
| truthfulqa_mc1 | JSONL: question, mc1_targets{choices, labels} | the one correct choice |
| boolq | JSONL: question, passage, answer (bool) | options "no" / "yes" |
| winogrande | JSONL: sentence with "_", option1, option2, answer "1"/"2" | 2-option multiple choice |
| gsm8k | JSONL: question, answer ending in "#### n" | generation, answer n |
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sago_fast.datasets.readers import unique_examples
from sago_fast.errors import InputError
from sago_fast.registry import Registry
from sago_fast.types import Example

Parse = Callable[[Mapping[str, Any], str, str], Example]  # (record, where, default id) -> Example


@dataclass(frozen=True)
class Format:
    name: str
    fields: str  # what it reads, for the README table
    parse: Parse
    looks_like: Callable[[Mapping[str, Any]], bool]  # unambiguous shape of one record


FORMATS: Registry[Format] = Registry("dataset format")


def _get(record: Mapping[str, Any], path: str, where: str) -> Any:
    """record[a][b] for ``a.b``; a missing step is one line naming the field."""
    value: Any = record
    for step in path.split("."):
        if not isinstance(value, Mapping) or step not in value or value[step] is None:
            raise InputError(f"{where}: field '{path}' is missing")
        value = value[step]
    return value


def _text(record: Mapping[str, Any], path: str, where: str) -> str:
    value = _get(record, path, where)
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{where}: field '{path}' must be a non-empty string")
    return value


def _id(record: Mapping[str, Any], key: str, default: str) -> str:
    value = record.get(key)
    return default if value is None or str(value).strip() == "" else str(value)


LETTERS = "ABCDEFGHIJ"


def _mmlu(record: Mapping[str, Any], where: str, default_id: str) -> Example:
    row = record["row"]
    if len(row) != 6:
        raise InputError(f"{where}: expected 6 columns (question, A, B, C, D, answer), found {len(row)}")
    question, *options, letter = (cell.strip() for cell in row)
    for name, value in zip(("question", "A", "B", "C", "D"), (question, *options), strict=True):
        if not value:
            raise InputError(f"{where}: field '{name}' is empty")
    if letter not in LETTERS[:4]:
        raise InputError(f"{where}: field 'answer': unknown answer letter {letter!r} (expected A-D)")
    return Example(default_id, "multiple_choice", question, tuple(options), LETTERS.index(letter))


def _arc(record: Mapping[str, Any], where: str, default_id: str) -> Example:
    stem = _text(record, "question.stem", where)
    choices = _get(record, "question.choices", where)
    if not isinstance(choices, list) or len(choices) < 2:
        raise InputError(f"{where}: field 'question.choices' must list at least 2 choices")
    labels, texts = [], []
    for j, choice in enumerate(choices):
        if not isinstance(choice, Mapping):
            raise InputError(f"{where}: field 'question.choices[{j}]' must be an object with label and text")
        labels.append(str(_get(choice, "label", f"{where}: question.choices[{j}]")))
        texts.append(_text(choice, "text", f"{where}: question.choices[{j}]"))
    key = str(_get(record, "answerKey", where)).strip()
    if key not in labels:
        raise InputError(f"{where}: field 'answerKey': {key!r} is not one of the labels {labels}")
    return Example(_id(record, "id", default_id), "multiple_choice", stem, tuple(texts), labels.index(key))


def hellaswag_clean(text: str) -> str:
    """lm-evaluation-harness's HellaSwag clean-up: ' [title]' -> '. ', bracketed tags dropped, spaces."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def _hellaswag(record: Mapping[str, Any], where: str, default_id: str) -> Example:
    if "ctx_a" in record and "ctx_b" in record:
        ctx = _text(record, "ctx_a", where) + " " + str(record["ctx_b"]).capitalize()
    else:
        ctx = _text(record, "ctx", where)
    endings = _get(record, "endings", where)
    if not isinstance(endings, list) or len(endings) < 2 or not all(isinstance(e, str) for e in endings):
        raise InputError(f"{where}: field 'endings' must be a list of at least 2 strings")
    label = _index(_get(record, "label", where), len(endings), "label", where)
    activity = record.get("activity_label")
    query = hellaswag_clean(f"{activity}: {ctx}" if activity else ctx)
    options = tuple(hellaswag_clean(e) for e in endings)
    return Example(_id(record, "ind", default_id), "multiple_choice", query, options, label)


def _index(value: Any, n: int, name: str, where: str, offset: int = 0) -> int:
    try:
        index = int(str(value).strip()) - offset
    except ValueError:
        raise InputError(f"{where}: field '{name}' must be an integer, not {value!r}") from None
    if not 0 <= index < n:
        raise InputError(f"{where}: field '{name}' = {value!r} is out of range for {n} options")
    return index


def _piqa(record: Mapping[str, Any], where: str, default_id: str) -> Example:
    goal = _text(record, "goal", where)
    options = (_text(record, "sol1", where), _text(record, "sol2", where))
    label = _index(_get(record, "label", where), 2, "label", where)
    return Example(_id(record, "id", default_id), "multiple_choice", goal, options, label)


def _truthfulqa(record: Mapping[str, Any], where: str, default_id: str) -> Example:
    question = _text(record, "question", where)
    choices = _get(record, "mc1_targets.choices", where)
    labels = _get(record, "mc1_targets.labels", where)
    if not isinstance(choices, list) or not isinstance(labels, list) or len(choices) != len(labels):
        raise InputError(f"{where}: field 'mc1_targets' needs choices and labels of the same length")
    if sorted(labels) != [0] * (len(labels) - 1) + [1]:
        raise InputError(f"{where}: field 'mc1_targets.labels' must mark exactly one choice with 1")
    return Example(
        _id(record, "id", default_id), "multiple_choice", question, tuple(choices), labels.index(1)
    )


def _boolq(record: Mapping[str, Any], where: str, default_id: str) -> Example:
    question = _text(record, "question", where)
    passage = _text(record, "passage", where)
    answer = _get(record, "answer", where)
    if not isinstance(answer, bool):
        raise InputError(f"{where}: field 'answer' must be true or false")
    text = f"{passage}\nQuestion: {question.rstrip('?')}?"
    return Example(_id(record, "idx", default_id), "multiple_choice", text, ("no", "yes"), int(answer))


def _winogrande(record: Mapping[str, Any], where: str, default_id: str) -> Example:
    sentence = _text(record, "sentence", where)
    if sentence.count("_") != 1:
        raise InputError(f"{where}: field 'sentence' must contain one blank '_'")
    options = (_text(record, "option1", where), _text(record, "option2", where))
    answer = _index(_get(record, "answer", where), 2, "answer", where, offset=1)
    return Example(_id(record, "qID", default_id), "multiple_choice", sentence, options, answer)


GSM8K_FINAL = re.compile(r"####\s*(-?[\d,]*\.?\d+)\s*$")


def _gsm8k(record: Mapping[str, Any], where: str, default_id: str) -> Example:
    from sago_fast.kernels.agreement import number_key  # beside answer_key; kernels load numba, so lazily

    question = _text(record, "question", where)
    answer = _text(record, "answer", where)
    match = GSM8K_FINAL.search(answer)
    if match is None:
        raise InputError(f"{where}: field 'answer' must end with '#### <number>'")
    number = number_key(match.group(1))
    return Example(
        _id(record, "id", default_id), "generation", question, answers=(number,), answer_type="number"
    )


for _format in (
    Format("mmlu", "CSV, no header: question, A, B, C, D, answer letter", _mmlu, lambda r: False),
    Format(
        "arc",
        "id, question.stem, question.choices[{label, text}], answerKey",
        _arc,
        lambda r: isinstance(r.get("question"), Mapping) and "answerKey" in r,
    ),
    Format(
        "hellaswag",
        "ctx or ctx_a + ctx_b, endings, label (activity_label, ind)",
        _hellaswag,
        lambda r: "endings" in r and ("ctx" in r or "ctx_a" in r),
    ),
    Format(
        "piqa",
        "goal, sol1, sol2; labels from <stem>-labels.lst",
        _piqa,
        lambda r: {"goal", "sol1", "sol2"} <= set(r),
    ),
    Format(
        "truthfulqa_mc1", "question, mc1_targets{choices, labels}", _truthfulqa, lambda r: "mc1_targets" in r
    ),
    Format(
        "boolq",
        "question, passage, answer (true/false)",
        _boolq,
        lambda r: {"passage", "question", "answer"} <= set(r),
    ),
    Format(
        "winogrande",
        "sentence with _, option1, option2, answer 1/2",
        _winogrande,
        lambda r: {"sentence", "option1", "option2"} <= set(r),
    ),
    Format(
        "gsm8k",
        "question, answer ending in #### n",
        _gsm8k,
        lambda r: isinstance(r.get("answer"), str) and "####" in r["answer"] and "question" in r,
    ),
):
    FORMATS.add(_format.name, _format)


def split_prefix(name: str) -> tuple[str | None, str]:
    """``"mmlu:path"`` -> ("mmlu", "path"); a name without a known format prefix -> (None, name)."""
    head, sep, rest = name.partition(":")
    if sep and head in FORMATS:
        return head, rest
    return None, name


def detect(record: Mapping[str, Any]) -> str | None:
    """The one format whose shape ``record`` has, or None (none, or more than one)."""
    matches = [name for name in FORMATS.names() if FORMATS.get(name).looks_like(record)]
    return matches[0] if len(matches) == 1 else None


def mmlu_rows(path: Path) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """(where, default id, record) of an MMLU CSV file, or of every CSV in a folder (id subject/row)."""
    files = sorted(path.glob("*.csv")) if path.is_dir() else [path]
    if not files:
        raise InputError(f"{path}: no MMLU .csv files in this folder")
    for file in files:
        subject = file.stem.removesuffix("_test").removesuffix("_dev").removesuffix("_val")
        try:
            with file.open(newline="", encoding="utf-8") as handle:
                for line, row in enumerate(csv.reader(handle), start=1):
                    if row:
                        yield f"{file}:{line}", f"{subject}/{line}", {"row": row}
        except UnicodeDecodeError as exc:
            raise InputError(f"{file}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None


def piqa_labels(path: Path) -> list[str]:
    """The labels file beside a PIQA data file: ``valid.jsonl`` -> ``valid-labels.lst``."""
    labels = path.with_name(f"{path.stem}-labels.lst")
    if not labels.is_file():
        raise InputError(f"{path}: PIQA labels file {labels.name} not found beside it")
    return [line.strip() for line in labels.read_text(encoding="utf-8").splitlines() if line.strip()]


def parse_records(
    name: str, records: Iterable[tuple[str, str, Mapping[str, Any]]], path: Path | None, source: str = ""
) -> list[Example]:
    """Every record through format ``name``, ids unique; PIQA's labels are joined from the labels file
    beside ``path`` (no path: a hub dataset ``source``, whose rows carry their label)."""
    fmt = FORMATS.get(name)
    labels = piqa_labels(path) if name == "piqa" and path is not None and path.is_file() else None
    examples: list[tuple[str, Example]] = []
    labels_name = f"{path.stem}-labels.lst" if path is not None else "labels"
    for n, (where, default_id, record) in enumerate(records):
        if labels is not None:
            if n >= len(labels):
                raise InputError(f"{where}: no label for this record: {labels_name} has {len(labels)} lines")
            record = {**record, "label": labels[n]}
        examples.append((where, fmt.parse(record, where, default_id)))
    if labels is not None and path is not None and len(labels) != len(examples):
        raise InputError(
            f"{path}: {path.stem}-labels.lst has {len(labels)} labels for {len(examples)} records"
        )
    return unique_examples(examples, path if path is not None else source)
