"""Answer extraction and comparison keys for generation tasks, by hand."""

from __future__ import annotations

import pytest

from sago_fast.answers.free_answers import extract_answer, is_correct
from sago_fast.kernels.agreement import answer_key


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        (" Paris\nQuestion: ...", "Paris"),
        ("\n\n  Rome.  ", "Rome"),
        ("Answer: 42", "42"),
        ("The answer is 'g'.", "g"),
        ("final answer - olleh", "olleh"),
        ('"kcots"', "kcots"),
        ("", ""),
        ("   \n  ", ""),
        ("Answers are hard", "Answers are hard"),  # not a label
    ],
)
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer


def test_answer_key():
    assert answer_key("The Paris!") == "paris"
    assert answer_key("  New   York ") == "new york"
    assert answer_key("a") == "a"  # normalisation would leave nothing: keep the letter
    assert answer_key("The") == "the"
    assert answer_key("...") == ""


def test_is_correct():
    assert is_correct("paris", ["Paris"])
    assert is_correct("A", ["a"])
    assert is_correct("4", ["four", "4"])
    assert not is_correct("", [""])  # an empty answer is never correct
    assert not is_correct("b", ["a"])
