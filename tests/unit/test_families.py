"""Every registered family: an input -> output case, properties over many seeds, a README row."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sago_fast.types import Example
from sago_fast.variants import FAMILIES, RenderSpec
from sago_fast.variants.base import derive_rng
from sago_fast.variants.render import TEMPLATES, render

MC = Example("q1", "multiple_choice", "Which is larger, 41 or 14?", ("14", "41", "55"), 1)
PAIR = Example("p1", "pairwise", "Which number is larger?", ("41", "14"), 0)
GEN = Example("g1", "generation", "What is the first letter of the word 'cat'?", answers=("c",))

CANONICAL_MC = (
    "Answer the following multiple-choice question.\n\n"
    "Question: Which is larger, 41 or 14?\nA. 14\nB. 41\nC. 55\nAnswer:"
)


def perturbed(family: str, example: Example = MC, k: int = 0, seed: int = 0) -> tuple[RenderSpec, str]:
    spec = FAMILIES.get(family)().perturb(
        RenderSpec.canonical(example), derive_rng(seed, example.example_id, family, k)
    )
    return spec, render(spec)


def check_template(spec, text):
    assert spec.template != 0
    assert text.startswith(TEMPLATES["multiple_choice"][spec.template])
    assert text.split("\n\n", 1)[1] == CANONICAL_MC.split("\n\n", 1)[1]


def check_separator(spec, text):
    assert spec.separator != ": "
    assert f"Question{spec.separator}Which is larger, 41 or 14?" in text


def check_field_case(spec, text):
    expected = {"upper": ("QUESTION", "ANSWER"), "lower": ("question", "answer")}[spec.field_case]
    assert text.splitlines()[2].startswith(expected[0]) and text.endswith(expected[1] + ":")


def check_enumerator(spec, text):
    labels = {"paren": ["(a)", "(b)", "(c)"], "number": ["1)", "2)", "3)"], "roman": ["i.", "ii.", "iii."]}[
        spec.enumerator
    ]
    assert [line.split(" ")[0] for line in text.splitlines()[3:6]] == labels


def check_option_permutation(spec, text):
    assert sorted(spec.option_order) == [0, 1, 2]
    assert spec.option_order.index(MC.answer_index) != MC.answer_index  # gold moved
    shown = [line.split(". ", 1)[1] for line in text.splitlines()[3:6]]
    assert shown == [MC.options[i] for i in spec.option_order]


def check_typo(spec, text):
    before, after = MC.question.split(" "), spec.question.split(" ")
    assert len(before) == len(after) and spec.question != MC.question
    for a, b in zip(before, after, strict=True):
        if a != b:  # exactly one adjacent swap inside the word
            diffs = [i for i in range(len(a)) if a[i] != b[i]]
            assert len(diffs) == 2 and diffs[1] == diffs[0] + 1 and a[diffs[0]] == b[diffs[1]]


def check_casing(spec, text):
    assert spec.question in (MC.question.upper(), MC.question.lower())


def check_whitespace(spec, text):
    assert spec.question.split() == MC.question.split() and "  " in spec.question


def check_punctuation(spec, text):
    assert spec.question != MC.question
    assert re.sub(r"[?.,! ]", "", spec.question) == re.sub(r"[?.,! ]", "", MC.question)


def check_fewshot_order(spec, text):
    assert len(spec.shots) == 3 and text.count("Question:") == 4
    assert text.endswith(CANONICAL_MC.split("\n\n", 1)[1])


def check_wrong_hint(spec, text):
    assert spec.hint_index is not None and spec.hint_index != MC.answer_index
    label = "ABC"[spec.option_order.index(spec.hint_index)]
    assert f"I think the answer is {label}, but I'm not sure." in text


def check_system_prompt(spec, text):
    from sago_fast.variants.families import SYSTEM_PROMPTS

    assert spec.system_prompt in SYSTEM_PROMPTS
    assert text == CANONICAL_MC  # the system turn is outside the rendered user prompt


def check_pair_swap(spec, text):
    assert spec.option_order == (1, 0)
    assert "A. 14\nB. 41" in text


CASES = {
    "template": (MC, check_template),
    "separator": (MC, check_separator),
    "field_case": (MC, check_field_case),
    "enumerator": (MC, check_enumerator),
    "option_permutation": (MC, check_option_permutation),
    "typo": (MC, check_typo),
    "casing": (MC, check_casing),
    "whitespace": (MC, check_whitespace),
    "punctuation": (MC, check_punctuation),
    "fewshot_order": (MC, check_fewshot_order),
    "wrong_hint": (MC, check_wrong_hint),
    "pair_swap": (PAIR, check_pair_swap),
    "system_prompt": (MC, check_system_prompt),
}


def test_at_least_twelve_families_and_each_has_a_case():
    assert len(FAMILIES) >= 12
    assert set(CASES) == set(FAMILIES.names()), "a registered family lacks a unit test case"


def test_every_family_has_a_readme_row():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    for name in FAMILIES.names():
        assert re.search(rf"^\| `{name}` \|", readme, flags=re.M), f"README has no row for family {name!r}"


def test_canonical_rendering():
    assert render(RenderSpec.canonical(MC)) == CANONICAL_MC


@pytest.mark.parametrize("family", sorted(CASES))
@pytest.mark.parametrize("seed", range(8))
def test_family_input_output(family, seed):
    example, check = CASES[family]
    spec, text = perturbed(family, example, seed=seed)
    check(spec, text)
    # deterministic: the same (seed, example, family, k) gives the same output
    assert perturbed(family, example, seed=seed)[1] == text


def test_families_declare_tasks_and_meaning():
    assert not FAMILIES.get("wrong_hint").meaning_preserving
    assert all(FAMILIES.get(n).meaning_preserving for n in FAMILIES.names() if n != "wrong_hint")
    assert not FAMILIES.get("option_permutation")().applies_to(GEN)
    assert FAMILIES.get("typo")().applies_to(GEN)
    assert json.loads(json.dumps(FAMILIES.get("typo")().params())) == {"rate": 0.15}


SHOTS = (
    Example("s1", "multiple_choice", "Which is smaller, 3 or 8?", ("8", "3"), 1),
    Example("s2", "multiple_choice", "Which is even, 5 or 6?", ("5", "6", "7"), 1),
    Example("s3", "multiple_choice", "Which is odd, 4 or 9?", ("9", "4"), 0),
)


@pytest.mark.parametrize("seed", range(6))
def test_fewshot_order_permutes_the_given_demonstrations(seed):
    base = RenderSpec.canonical(MC, SHOTS, "text")
    spec = FAMILIES.get("fewshot_order")().perturb(base, derive_rng(seed, MC.example_id, "fewshot_order", 0))
    assert sorted(s.example_id for s in spec.shots) == ["s1", "s2", "s3"]
    assert [s.example_id for s in spec.shots] != ["s1", "s2", "s3"]  # never the canonical order


def test_demonstrations_show_the_label_or_the_option_text():
    label = render(RenderSpec.canonical(MC, SHOTS[:1], "label"))
    text = render(RenderSpec.canonical(MC, SHOTS[:1], "text"))
    assert "Question: Which is smaller, 3 or 8?\nA. 8\nB. 3\nAnswer: B\n\n" in label
    assert "Question: Which is smaller, 3 or 8?\nA. 8\nB. 3\nAnswer: 3\n\n" in text
    assert label.endswith(CANONICAL_MC.split("\n\n", 1)[1])
