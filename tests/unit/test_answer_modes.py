"""Answer modes by hand: cloze, cloze_norm and letter on a model whose log-probs are known exactly."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from scipy.special import log_softmax

from sago_fast.answers.multiple_choice import answer_modes, option_answer
from sago_fast.answers.prompting import ModelPrompts
from sago_fast.errors import InputError
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


def unigram(tokens):
    return np.array([CHAR_LOGP.get(chr(t), OTHER) for t in tokens])


class UnigramModel:
    tokenizer = CharTokenizer()
    max_positions = None

    def __init__(self):
        self.prefills = 0
        self.whole_sequences = 0

    def prefill(self, token_ids, continuations, generation=None, share_keys=None):
        self.prefills += 1
        scored = [[unigram(c) for c in conts] for conts in continuations]
        return SimpleNamespace(continuation_logprobs=scored, probe=None, generations=None, tokens_processed=0)

    def target_logprobs(self, sequences, n_targets):
        self.whole_sequences += 1
        return [unigram(seq[len(seq) - n :]) for seq, n in zip(sequences, n_targets, strict=True)]


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


def test_one_prefill_for_every_mode_and_whole_sequences_only_when_tokens_merge():
    model = UnigramModel()
    answer_modes(model, [EXAMPLE], [variant((2, 0, 1))], ModelPrompts(("Q",), chat=True))
    assert (model.prefills, model.whole_sequences) == (1, 0)
    # "Q " + " A": the context's trailing space moves into the continuation, so the context no longer
    # encodes to the prompt's tokens: those pairs are scored as whole sequences
    model = UnigramModel()
    (answers,) = answer_modes(model, [EXAMPLE], [variant()], ModelPrompts(("Q ",), chat=False))
    assert (model.prefills, model.whole_sequences) == (1, 1)
    np.testing.assert_allclose(answers["letter"].option_loglik, [-0.7, -1.7, -2.7])  # "  A": two spaces


def test_unknown_mode_is_one_line():
    with pytest.raises(InputError, match="unknown answer mode 'mmlu'"):
        answer_modes(
            UnigramModel(), [EXAMPLE], [variant()], ModelPrompts(("Q",), chat=False), modes=("mmlu",)
        )
