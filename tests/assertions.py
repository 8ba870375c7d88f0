"""Assertions shared by the tests: floats computed under different batch shapes compare with a tolerance."""

from __future__ import annotations

import numpy as np


def assert_same_generations(got, expected, atol=1e-5):
    """Token ids, texts and stop reasons exactly; log-probs (other batch shapes) within ``atol``."""
    assert [(g.token_ids, g.text, g.stop_reason) for g in got] == [
        (g.token_ids, g.text, g.stop_reason) for g in expected
    ]
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=atol, rtol=0)
