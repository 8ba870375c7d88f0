"""Readers (JSONL, CSV, Parquet, save_to_disk) and their one-line errors naming file, line and field."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sago_fast.datasets import FieldMap, read_examples
from sago_fast.datasets.builtin import SUITES
from sago_fast.datasets.load import load_dataset
from sago_fast.errors import InputError
from sago_fast.types import Example

RECORDS = [
    {"id": "m1", "question": "What is 2 + 3?", "options": ["4", "5"], "answer": 1},
    {"id": "g1", "prompt": "Say hi.", "answers": ["hi", "hello"]},
    {"id": "p1", "question": "Which is larger?", "a": "41", "b": "14", "answer": "a"},
]
EXPECTED = [
    Example("m1", "multiple_choice", "What is 2 + 3?", ("4", "5"), 1),
    Example("g1", "generation", "Say hi.", answers=("hi", "hello")),
    Example("p1", "pairwise", "Which is larger?", ("41", "14"), 0),
]


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_jsonl(tmp_path):
    assert read_examples(write_jsonl(tmp_path / "d.jsonl", RECORDS)) == EXPECTED


def test_csv(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text('id,question,options,answer\nm1,What is 2 + 3?,"[""4"", ""5""]",1\n', encoding="utf-8")
    assert read_examples(path) == EXPECTED[:1]


def test_parquet(tmp_path):
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(RECORDS[:1]), path)
    assert read_examples(path) == EXPECTED[:1]


def test_hf_save_to_disk_folder(tmp_path):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "hf"
    datasets.Dataset.from_list([RECORDS[0], {**RECORDS[0], "id": "m2"}]).save_to_disk(str(folder))
    examples = read_examples(folder)
    assert [e.example_id for e in examples] == ["m1", "m2"] and examples[0] == EXPECTED[0]


def test_field_mapping(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"qid": 7, "stem": "Q?", "choices": ["a", "b"], "label": 0}])
    fields = FieldMap.parse(["id=qid", "question=stem", "options=choices", "answer=label"])
    assert read_examples(path, fields) == [Example("7", "multiple_choice", "Q?", ("a", "b"), 0)]
    with pytest.raises(InputError, match="NAME=SOURCE"):
        FieldMap.parse(["bogus"])


BAD_CASES = [
    ([], "no examples"),
    (
        ['{"id": "m1", "question": "Q?", "options": ["a", "b"], "answer": 0}', '{"id": "m2", "question": '],
        ":2: malformed JSON",
    ),
    (['{"id": "m1", "options": ["a", "b"], "answer": 0}'], ":1: field 'question' is missing"),
    (
        ['{"id": "m1", "question": "Q?", "options": ["a", "b"], "answer": 2}'],
        ":1: field 'answer' = 2 is out of range",
    ),
    (
        ['{"id": "m1", "question": "Q?", "options": ["a", "b"], "answer": 0}'] * 2,
        ":2: field 'id': duplicate id 'm1'",
    ),
    (['{"id": "m1", "question": "  ", "options": ["a", "b"], "answer": 0}'], ":1: field 'question' is empty"),
    (['{"id": "m1", "question": "Q?", "options": ["a"], "answer": 0}'], "field 'options' needs at least 2"),
    (
        ['{"id": "p1", "question": "Q?", "a": "x", "b": "y", "answer": "c"}'],
        'field \'answer\' must be "a" or "b"',
    ),
    (['{"question": "Q?", "options": ["a", "b"], "answer": 0}'], "field 'id' is missing"),
]


@pytest.mark.parametrize("lines,message", BAD_CASES)
def test_bad_jsonl(tmp_path, lines, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        read_examples(path)
    assert str(path) in str(info.value)


def test_non_utf8(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"id": "m1", "question": "Q?", "options": ["a", "b"], "answer": 0}\n{"id": "\xff"}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:2: not valid UTF-8"):
        read_examples(path)


def test_builtin_suites():
    names = SUITES.names()
    assert len(names) >= 4
    task_types = {SUITES.get(n).task_type for n in names}
    assert {"generation", "pairwise", "multiple_choice"} <= task_types
    for name in names:
        examples = SUITES.get(name).build()
        assert len(examples) >= 200
        assert len({e.example_id for e in examples}) == len(examples)
        assert SUITES.get(name).build(7) == examples[:7]  # more examples never change the first ones
        for e in examples:
            if e.has_options:
                assert 0 <= e.answer_index < len(e.options) and len(set(e.options)) == len(e.options)


def test_comparison_gold_is_right():
    for e in SUITES.get("comparison").build():
        a, b = (int(x) for x in e.options)
        want = max(a, b) if "larger" in e.question else min(a, b)
        assert int(e.options[e.answer_index]) == want


def test_load_dataset_names_and_errors(tmp_path):
    assert load_dataset("arithmetic", limit=3).examples == tuple(SUITES.get("arithmetic").build(3))
    with pytest.raises(InputError, match="did you mean 'arithmetic'"):
        load_dataset("arithmatic")
    with pytest.raises(InputError, match="no such dataset file"):
        load_dataset(str(tmp_path / "x.jsonl"))
