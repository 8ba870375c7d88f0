"""`sago bench`'s greedy agreement compares like with like."""

from __future__ import annotations


def test_greedy_agreement_is_like_for_like():
    """sago's EOS (HF may not emit it under min_new_tokens) ends the comparison; a near-tie where the
    rows first differ is float noise; anything else is disagreement."""
    import numpy as np

    from sago_fast.bench import greedy_agreement

    eos = [2]
    assert greedy_agreement([[5, 6, 2, 7]], [[5, 6, 9, 9]], eos) == 1.0  # equal up to sago's EOS
    assert greedy_agreement([[5, 6, 7]], [[5, 8, 7]], eos) == 0.0
    steps = np.log(np.full((1, 3, 10), 0.05))
    steps[0, 1, 6], steps[0, 1, 8] = np.log(0.30), np.log(0.30) - 5e-5  # a near-tie at step 1
    assert greedy_agreement([[5, 6, 7]], [[5, 8, 7]], eos, steps) == 1.0
    steps[0, 1, 8] = np.log(0.20)
    assert greedy_agreement([[5, 6, 7]], [[5, 8, 7]], eos, steps) == 0.0
    assert greedy_agreement([[1], [1]], [[1], [3]], eos) == 0.5
