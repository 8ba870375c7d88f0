"""Read examples from JSONL, CSV, Parquet or a Hugging Face ``save_to_disk`` folder, validating every record.

Default field names (mappable with :class:`FieldMap`):
  multiple choice  {"id", "question", "options": [...], "answer": gold index}
  generation       {"id", "prompt", "answers": [...]}
  pairwise         {"id", "question", "a", "b", "answer": "a" | "b"}
Every problem is reported as ``file:line: field 'x': what is wrong`` and nothing is returned.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sago_fast.errors import InputError
from sago_fast.types import Example


@dataclass(frozen=True)
class FieldMap:
    """Names of the fields in the source records; a dotted name (``question.stem``) reads a nested field.
    answer_offset: subtracted from an integer answer (1 for formats that count options from 1)."""

    id: str = "id"
    question: str = "question"
    prompt: str = "prompt"
    options: str = "options"
    answer: str = "answer"
    answers: str = "answers"
    a: str = "a"
    b: str = "b"
    answer_offset: int = 0

    @classmethod
    def parse(cls, pairs: list[str] | tuple[str, ...]) -> FieldMap:
        """From CLI strings like ``question=stem``, ``question=question.stem`` or ``answer_offset=1``."""
        mapping: dict[str, Any] = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or key not in cls.__dataclass_fields__ or not value.strip():
                raise InputError(
                    f"--field {pair!r}: expected NAME=SOURCE_FIELD with NAME in {', '.join(cls.__dataclass_fields__)}"
                )
            if key == "answer_offset":
                try:
                    mapping[key] = int(value)
                except ValueError:
                    raise InputError(f"--field {pair!r}: answer_offset must be an integer") from None
            else:
                mapping[key] = value
        return cls(**mapping)


def source_records(path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """(line number or row number, record) for each record of the file."""
    suffix = path.suffix.lower()
    if path.is_dir():
        yield from enumerate(_read_saved_hf_dataset(path), start=1)
    elif suffix in (".jsonl", ".json"):
        with path.open("rb") as handle:
            for line_no, raw in enumerate(handle, start=1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InputError(
                        f"{path}:{line_no}: not valid UTF-8 ({exc.reason} at byte {exc.start})"
                    ) from None
                if not text.strip():
                    continue
                try:
                    record = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise InputError(
                        f"{path}:{line_no}: malformed JSON ({exc.msg} at column {exc.colno})"
                    ) from None
                if not isinstance(record, dict):
                    raise InputError(f"{path}:{line_no}: expected a JSON object")
                yield line_no, record
    elif suffix == ".csv":
        try:
            with path.open(newline="", encoding="utf-8") as handle:
                for row, record in enumerate(csv.DictReader(handle), start=2):  # line 1 is the header
                    yield row, {k: _csv_value(v) for k, v in record.items()}
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    elif suffix == ".parquet":
        import pyarrow.parquet as pq

        for row, record in enumerate(pq.read_table(path).to_pylist(), start=1):
            yield row, record
    else:
        raise InputError(f"{path}: unknown format (expected .jsonl, .csv, .parquet or a save_to_disk folder)")


def _read_saved_hf_dataset(path: Path) -> list[dict[str, Any]]:
    """Rows of a ``datasets.Dataset.save_to_disk`` folder (Arrow stream files listed in state.json)."""
    import pyarrow as pa

    state_file = path / "state.json"
    if not state_file.is_file():
        if (path / "dataset_dict.json").is_file():
            raise InputError(f"{path}: a DatasetDict folder; point at one split (e.g. {path / 'test'})")
        raise InputError(f"{path}: not a save_to_disk dataset folder (no state.json)")
    state = json.loads(state_file.read_text(encoding="utf-8"))
    rows: list[dict[str, Any]] = []
    for entry in state.get("_data_files", []):
        with pa.memory_map(str(path / entry["filename"])) as source:
            rows.extend(pa.ipc.open_stream(source).read_all().to_pylist())
    return rows


def _csv_value(value: str | None) -> Any:
    """CSV cells holding JSON lists/numbers are decoded (options, answers, answer index)."""
    if value is None:
        return None
    stripped = value.strip()
    if stripped.startswith("[") or stripped.lstrip("-").isdigit():
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            return value
    return value


def has_field(record: Mapping[str, Any], field: str) -> bool:
    return _value(record, field) is not None


def _value(record: Mapping[str, Any], field: str) -> Any:
    """record[field], or record[a][b] for a dotted ``a.b`` (None when a step is missing)."""
    if field in record:
        return record[field]
    value: Any = record
    for step in field.split("."):
        if not isinstance(value, Mapping) or step not in value:
            return None
        value = value[step]
    return value


def _text(record: Mapping[str, Any], field: str, where: str) -> str:
    value = _value(record, field)
    if value is None:
        raise InputError(f"{where}: field '{field}' is missing")
    if not isinstance(value, str):
        raise InputError(f"{where}: field '{field}' must be a string")
    if not value.strip():
        raise InputError(f"{where}: field '{field}' is empty")
    return value


def _string_list(record: Mapping[str, Any], field: str, where: str, minimum: int) -> tuple[str, ...]:
    value = _value(record, field)
    if value is None:
        raise InputError(f"{where}: field '{field}' is missing")
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{where}: field '{field}' must be a list of strings")
    if len(value) < minimum:
        raise InputError(f"{where}: field '{field}' needs at least {minimum} entries")
    if any(not v.strip() for v in value):
        raise InputError(f"{where}: field '{field}' has an empty entry")
    return tuple(value)


def parse_record(record: Mapping[str, Any], fields: FieldMap, where: str) -> Example:
    """One source record → Example; the task type follows from which fields are present."""
    raw_id = _value(record, fields.id)
    if raw_id is None or str(raw_id).strip() == "":
        raise InputError(f"{where}: field '{fields.id}' is missing")
    example_id = str(raw_id)
    if has_field(record, fields.a) and has_field(record, fields.b):
        question = _text(record, fields.question, where)
        items = (_text(record, fields.a, where), _text(record, fields.b, where))
        answer = _value(record, fields.answer)
        if answer not in ("a", "b"):
            raise InputError(f'{where}: field \'{fields.answer}\' must be "a" or "b"')
        return Example(example_id, "pairwise", question, items, 0 if answer == "a" else 1)
    if has_field(record, fields.options):
        question = _text(record, fields.question, where)
        options = _string_list(record, fields.options, where, minimum=2)
        answer = _value(record, fields.answer)
        if isinstance(answer, bool) or not isinstance(answer, int):
            raise InputError(f"{where}: field '{fields.answer}' must be an integer option index")
        answer -= fields.answer_offset
        if not 0 <= answer < len(options):
            raise InputError(
                f"{where}: field '{fields.answer}' = {answer} is out of range for {len(options)} options"
            )
        return Example(example_id, "multiple_choice", question, options, answer)
    if has_field(record, fields.prompt):
        prompt = _text(record, fields.prompt, where)
        answers = _string_list(record, fields.answers, where, minimum=1)
        return Example(example_id, "generation", prompt, answers=answers)
    raise InputError(
        f"{where}: cannot tell the task type: need '{fields.options}' (multiple choice), "
        f"'{fields.prompt}' (generation) or '{fields.a}'/'{fields.b}' (pairwise)"
    )


def read_examples(path: str | os.PathLike[str], fields: FieldMap = FieldMap()) -> list[Example]:
    """All examples of a file, validated; raises InputError naming file, line and field."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such dataset file")
    return examples_from_records(path, source_records(path), fields)


def examples_from_records(
    source: str | os.PathLike[str], records: Iterable[tuple[int, Mapping[str, Any]]], fields: FieldMap
) -> list[Example]:
    """(line, record) pairs of ``source`` in the SPEC schema -> validated examples with unique ids."""
    return unique_examples(
        ((f"{source}:{line}", parse_record(record, fields, f"{source}:{line}")) for line, record in records),
        source,
        fields.id,
    )


def unique_examples(
    located: Iterable[tuple[str, Example]], source: str | os.PathLike[str], id_field: str = "id"
) -> list[Example]:
    """The examples of (where, example) pairs, each id once; a duplicate or no example at all is one
    line naming the source (and the line of both duplicates)."""
    examples: list[Example] = []
    seen: dict[str, str] = {}
    for where, example in located:
        if example.example_id in seen:
            raise InputError(
                f"{where}: field '{id_field}': duplicate id {example.example_id!r} (first at {seen[example.example_id]})"
            )
        seen[example.example_id] = where
        examples.append(example)
    if not examples:
        raise InputError(f"{source}: no examples (empty file)")
    return examples
