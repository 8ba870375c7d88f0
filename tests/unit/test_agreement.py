from __future__ import annotations

import numpy as np

from sago_fast.kernels import exact_match, normalize_answer, pairwise_agreement, token_f1


def test_exact_match_and_f1_hand_computed():
    assert exact_match([1, 2, 3], [1, 2, 3]) == 1.0
    assert exact_match([1, 2, 3], [1, 2]) == 0.0
    # common = {1, 2} (2 tokens): precision 2/3, recall 2/4 -> F1 = 2 * (2/3 * 1/2) / (2/3 + 1/2) = 4/7
    assert abs(token_f1([1, 2, 5], [1, 2, 3, 4]) - 4 / 7) < 1e-12
    assert token_f1([7, 7, 8], [7, 8, 8]) == 2 * (2 / 3) * (2 / 3) / (4 / 3)
    assert token_f1([], []) == 1.0 and token_f1([1], []) == 0.0


def test_pairwise_agreement_order():
    seqs = [[1, 2], [1, 2], [3]]
    np.testing.assert_array_equal(pairwise_agreement(seqs, "exact_match"), [1.0, 0.0, 0.0])


def test_normalize_answer():
    assert normalize_answer("  The Answer: Paris! ") == "answer paris"
