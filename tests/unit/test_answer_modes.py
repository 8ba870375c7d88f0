"""Answer modes by hand: cloze, cloze_norm and letter on a model whose log-probs are known exactly."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import log_softmax

from sago_fast.errors import InputError
from sago_fast.runtime.options import answer_modes, option_answer
from sago_fast.runtime.prompting import ModelPrompts
from sago_fast.types import Example, Variant

# log P(character) after any prefix: the "model" below is a unigram over characters
CHAR_LOGP = {"A": -0.5, "B": -1.5, "C": -2.5, " ": -0.1, "x": -1.0, "y": -2.0, "z": -0.25}
OTHER = -6.0


class CharTokenizer:
    """One token per character (id = code point); no special tokens."""

    bos_token_id = None
    eos_token_id = 0

    def __call__(self, text, add_special_tokens=True):
        if isinstance(text, str):
            return {"input_ids": [ord(c) for c in text]}
        return {"input_ids": [[ord(c) for c in t] for t in text]}


class UnigramModel:
    tokenizer = CharTokenizer()
    max_positions = None

    def __init__(self):
        self.calls = 0

    def target_logprobs(self, sequences, n_targets):
        self.calls += 1
        return [
            np.array([CHAR_LOGP.get(chr(t), OTHER) for t in seq[len(seq) - n :]])
            for seq, n in zip(sequences, n_targets, strict=True)
        ]


EXAMPLE = Example("e1", "multiple_choice", "Pick one", ("x", "yy", "zzzz"), 2)


def variant(order=(0, 1, 2)):
    return Variant(
        "e1", f"e1/v/{order}", "option_permutation", 0, "{}", False, True, "Q", order, None, ("A", "B", "C")
    )


def test_option_answer_by_hand():
    answer = option_answer(np.array([-1.0, -3.0, -2.0]), gold=2, mode="cloze")
    expected = log_softmax([-1.0, -3.0, -2.0])
    np.testing.assert_allclose(answer.option_logprobs, expected)
    assert answer.answer_index == 0 and not answer.correct
    assert answer.p_gold == pytest.approx(np.exp(expected[2]))
    assert answer.margin == pytest.approx(1.0)
    assert option_answer(np.array([-2.0, -2.0]), gold=1, mode="cloze").answer_index == 0  # ties: lowest


def test_cloze_and_cloze_norm_by_hand():
    model = UnigramModel()
    (answers,) = answer_modes(model, [EXAMPLE], [variant()], ModelPrompts(("Q",), chat=False))
    # continuation " " + option: loglik = -0.1 + sum over characters
    cloze = np.array([-0.1 - 1.0, -0.1 - 4.0, -0.1 - 1.0])
    np.testing.assert_allclose(answers["cloze"].option_loglik, cloze)
    np.testing.assert_allclose(answers["cloze_norm"].option_loglik, cloze / [1, 2, 4])
    assert answers["cloze"].answer_index == 0  # x and zzzz tie: lowest index
    assert answers["cloze_norm"].answer_index == 2 and answers["cloze_norm"].correct


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1), (1, 2, 0)])
def test_letter_maps_labels_back_to_content(order):
    """ "A" is always the likeliest label: the answer is whatever option is shown first."""
    model = UnigramModel()
    (answers,) = answer_modes(model, [EXAMPLE], [variant(order)], ModelPrompts(("Q",), chat=False))
    letter = answers["letter"]
    assert letter.answer_index == order[0]
    label_loglik = {"A": -0.6, "B": -1.6, "C": -2.6}  # " " + label
    for position, content in enumerate(order):
        assert letter.option_loglik[content] == pytest.approx(label_loglik["ABC"[position]])


def test_single_token_labels_come_from_the_next_token_distribution():
    """In chat format the label is one token right after the prompt: no scoring pass for it."""
    model = UnigramModel()
    next_logprobs = np.full((1, 256), -9.0)
    next_logprobs[0, ord("A")], next_logprobs[0, ord("B")], next_logprobs[0, ord("C")] = -3.0, -0.2, -4.0
    prompt_ids = [[ord("Q")]]
    (answers,) = answer_modes(
        model,
        [EXAMPLE],
        [variant((2, 0, 1))],
        ModelPrompts(("Q",), chat=True),
        modes=("letter",),
        prompt_ids=prompt_ids,
        next_logprobs=next_logprobs,
    )
    assert model.calls == 0
    assert answers["letter"].answer_index == 0  # "B" shows option 0
    np.testing.assert_allclose(answers["letter"].option_loglik, [-0.2, -4.0, -3.0])


def test_unknown_mode_is_one_line():
    with pytest.raises(InputError, match="unknown answer mode 'mmlu'"):
        answer_modes(
            UnigramModel(), [EXAMPLE], [variant()], ModelPrompts(("Q",), chat=False), modes=("mmlu",)
        )
