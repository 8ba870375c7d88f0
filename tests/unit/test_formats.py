"""Published benchmark formats read into exactly the examples of the equivalent SPEC-schema JSONL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sago_fast.datasets.formats import FORMATS, hellaswag_clean
from sago_fast.datasets.load import load_dataset
from sago_fast.errors import InputError


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def spec_mc(tmp_path: Path, rows: list[tuple[str, str, list[str], int]]) -> Path:
    return jsonl(
        tmp_path / "spec.jsonl", [{"id": i, "question": q, "options": o, "answer": a} for i, q, o, a in rows]
    )


def same_examples(published: str, spec: Path, reader: str) -> None:
    got, expected = load_dataset(published), load_dataset(str(spec))
    assert got.reader == reader and expected.reader == "sago"
    assert got.examples == expected.examples


def test_mmlu_csv_and_folder(tmp_path):
    folder = tmp_path / "mmlu"
    folder.mkdir()
    (folder / "astronomy_test.csv").write_text(
        'What orbits the Earth?,The Sun,The Moon,Mars,Venus,B\n"Hot, bright star?",Sirius,Pluto,Io,Ceres,A\n',
        encoding="utf-8",
    )
    (folder / "virology_test.csv").write_text(
        "Which is a virus?,HIV,E. coli,Yeast,Mold,A\n", encoding="utf-8"
    )
    spec = spec_mc(
        tmp_path,
        [
            ("astronomy/1", "What orbits the Earth?", ["The Sun", "The Moon", "Mars", "Venus"], 1),
            ("astronomy/2", "Hot, bright star?", ["Sirius", "Pluto", "Io", "Ceres"], 0),
            ("virology/1", "Which is a virus?", ["HIV", "E. coli", "Yeast", "Mold"], 0),
        ],
    )
    same_examples(str(folder), spec, "mmlu")  # detected from the shape
    assert load_dataset(f"mmlu:{folder / 'virology_test.csv'}").examples[0].example_id == "virology/1"


def test_arc_letters_digits_and_five_choices(tmp_path):
    rows = [
        {
            "id": "Mercury_1",
            "question": {
                "stem": "Which is a gas?",
                "choices": [
                    {"label": "A", "text": "ice"},
                    {"label": "B", "text": "steam"},
                    {"label": "C", "text": "rock"},
                ],
            },
            "answerKey": "B",
        },
        {
            "id": "NYSED_2",
            "question": {
                "stem": "Pick 4",
                "choices": [{"label": str(i), "text": f"n{i}"} for i in range(1, 6)],
            },
            "answerKey": "4",
        },
    ]
    spec = spec_mc(
        tmp_path,
        [
            ("Mercury_1", "Which is a gas?", ["ice", "steam", "rock"], 1),
            ("NYSED_2", "Pick 4", [f"n{i}" for i in range(1, 6)], 3),
        ],
    )
    same_examples(str(jsonl(tmp_path / "arc.jsonl", rows)), spec, "arc")


def test_hellaswag_with_lm_eval_cleanup(tmp_path):
    rows = [
        {
            "ind": 24,
            "activity_label": "Roof shingle removal",
            "ctx_a": "A man is sitting on a roof.",
            "ctx_b": "he",
            "endings": ["is using wrap [title] to wrap.", "starts pulling up roofing."],
            "label": 1,
        }
    ]
    spec = spec_mc(
        tmp_path,
        [
            (
                "24",
                "Roof shingle removal: A man is sitting on a roof. He",
                ["is using wrap. to wrap.", "starts pulling up roofing."],
                1,
            )
        ],
    )
    same_examples(str(jsonl(tmp_path / "hellaswag.jsonl", rows)), spec, "hellaswag")
    assert hellaswag_clean("A [header] b  c") == "A b c"


def test_piqa_labels_file(tmp_path):
    data = jsonl(
        tmp_path / "valid.jsonl",
        [
            {"goal": "Open a jar", "sol1": "twist the lid", "sol2": "eat the lid"},
            {"goal": "Dry hair", "sol1": "use water", "sol2": "use a towel"},
        ],
    )
    (tmp_path / "valid-labels.lst").write_text("0\n1\n", encoding="utf-8")
    spec = spec_mc(
        tmp_path,
        [
            ("valid-1", "Open a jar", ["twist the lid", "eat the lid"], 0),
            ("valid-2", "Dry hair", ["use water", "use a towel"], 1),
        ],
    )
    same_examples(str(data), spec, "piqa")


def test_truthfulqa_boolq_winogrande_gsm8k(tmp_path):
    tqa = jsonl(
        tmp_path / "tqa.jsonl",
        [
            {
                "question": "Is the Earth flat?",
                "mc1_targets": {"choices": ["Yes", "No, it is round"], "labels": [0, 1]},
            }
        ],
    )
    same_examples(
        str(tqa),
        spec_mc(tmp_path, [("tqa-1", "Is the Earth flat?", ["Yes", "No, it is round"], 1)]),
        "truthfulqa_mc1",
    )
    boolq = jsonl(
        tmp_path / "boolq.jsonl",
        [{"question": "is water wet", "passage": "Water is a liquid.", "answer": True}],
    )
    same_examples(
        str(boolq),
        spec_mc(tmp_path, [("boolq-1", "Water is a liquid.\nQuestion: is water wet?", ["no", "yes"], 1)]),
        "boolq",
    )
    wino = jsonl(
        tmp_path / "wino.jsonl",
        [
            {
                "qID": "w1",
                "sentence": "The cup beat the jug because _ was big.",
                "option1": "the cup",
                "option2": "the jug",
                "answer": "2",
            }
        ],
    )
    same_examples(
        str(wino),
        spec_mc(tmp_path, [("w1", "The cup beat the jug because _ was big.", ["the cup", "the jug"], 1)]),
        "winogrande",
    )
    gsm = jsonl(
        tmp_path / "gsm.jsonl", [{"question": "What is 600 + 634?", "answer": "600+634=1234\n#### 1,234"}]
    )
    spec = jsonl(
        tmp_path / "gspec.jsonl", [{"id": "gsm-1", "prompt": "What is 600 + 634?", "answers": ["1234"]}]
    )
    from dataclasses import replace

    got = load_dataset(str(gsm))
    assert got.reader == "gsm8k"
    assert got.examples == tuple(replace(e, answer_type="number") for e in load_dataset(str(spec)).examples)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("mmlu.csv", "Q?,a,b,c,d,E\n", "field 'answer': unknown answer letter 'E'"),
        ("mmlu2.csv", "Q?,a,,c,d,A\n", "field 'B' is empty"),
        (
            "arc.jsonl",
            '{"id": "x", "question": {"stem": "Q", "choices": [{"label": "A", "text": "a"}, '
            '{"label": "B", "text": "b"}]}, "answerKey": "C"}\n',
            "field 'answerKey': 'C' is not one of",
        ),
        (
            "hs.jsonl",
            '{"ctx": "c", "endings": ["a", "b"], "label": 2}\n',
            "field 'label' = 2 is out of range",
        ),
        (
            "tqa.jsonl",
            '{"question": "q", "mc1_targets": {"choices": ["a", "b"], "labels": [0, 0]}}\n',
            "must mark exactly one choice",
        ),
        (
            "bq.jsonl",
            '{"question": "q", "passage": "p", "answer": "yes"}\n',
            "field 'answer' must be true or false",
        ),
        (
            "wg.jsonl",
            '{"sentence": "a _ b", "option1": "x", "option2": "y", "answer": "3"}\n',
            "field 'answer' = '3' is out of range",
        ),
        ("gs.jsonl", '{"question": "q", "answer": "no number here ####"}\n', "must end with '#### <number>'"),
        (
            "arc2.jsonl",
            '{"id": "x", "question": {"choices": []}, "answerKey": "A"}\n',
            "field 'question.stem' is missing",
        ),
    ],
)
def test_malformed_records_are_one_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    prefix = "mmlu:" if name.startswith("mmlu") else ""
    with pytest.raises(InputError, match=message) as info:
        load_dataset(prefix + str(path))
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_piqa_labels_file_shorter_than_the_data(tmp_path):
    data = jsonl(tmp_path / "dev.jsonl", [{"goal": "g", "sol1": "a", "sol2": "b"}] * 2)
    (tmp_path / "dev-labels.lst").write_text("1\n", encoding="utf-8")
    with pytest.raises(
        InputError, match=r"dev.jsonl:2: no label for this record: dev-labels.lst has 1 lines"
    ):
        load_dataset(str(data))
    (tmp_path / "dev-labels.lst").unlink()
    with pytest.raises(InputError, match=r"labels file dev-labels\.lst not found"):
        load_dataset(str(data))


def test_field_mapping_with_nested_sources_and_offset(tmp_path):
    rows = [{"uid": "a1", "item": {"stem": "Pick two", "choices": ["one", "two"]}, "gold": 2}]
    path = jsonl(tmp_path / "custom.jsonl", rows)
    from sago_fast.datasets.readers import FieldMap

    fields = FieldMap.parse(
        ["id=uid", "question=item.stem", "options=item.choices", "answer=gold", "answer_offset=1"]
    )
    (example,) = load_dataset(str(path), fields=fields).examples
    assert (example.example_id, example.question, example.options, example.answer_index) == (
        "a1",
        "Pick two",
        ("one", "two"),
        1,
    )
    with pytest.raises(InputError, match="--field 'colour=x': expected NAME=SOURCE_FIELD"):
        FieldMap.parse(["colour=x"])


def test_every_format_has_a_readme_row():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    for name in FORMATS.names():
        assert f"| `{name}:` |" in readme, name


def test_offline_hub_is_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(InputError) as info:
        load_dataset("hf:some-org/some-benchmark:main:test")
    assert "\n" not in str(info.value) and "hf:some-org/some-benchmark" in str(info.value)


def test_hub_loading_code_on_a_local_datasets_folder(tmp_path):
    folder = tmp_path / "arc_local"
    folder.mkdir()
    jsonl(
        folder / "test.jsonl",
        [
            {
                "id": "q1",
                "question": {
                    "stem": "Which is a gas?",
                    "choices": [{"label": "A", "text": "ice"}, {"label": "B", "text": "steam"}],
                },
                "answerKey": "B",
            }
        ],
    )
    data = load_dataset(f"hf:{folder}::test")
    assert data.reader == "arc" and data.examples[0].options == ("ice", "steam")
    assert data.examples[0].answer_index == 1 and data.examples[0].example_id == "q1"


def test_gsm8k_answers_are_the_last_number():
    from sago_fast.answers.free_answers import extract_number, is_correct

    assert extract_number("600 + 634 = 1,234.\nSo the answer is 1,234.") == "1234"
    assert extract_number("It costs $18.00 in total") == "18.00" and extract_number("none") == ""
    assert extract_number("The answer is -5") == "-5" and is_correct(extract_number("... 1,234"), ["1234"])
