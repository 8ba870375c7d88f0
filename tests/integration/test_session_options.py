"""SessionOptions that change how ONNX Runtime opens a graph (memory planning, weight packing) change
neither the outputs nor the errors: every combination probes, scores and decodes like the default."""

from __future__ import annotations

import numpy as np
import pytest
from assertions import assert_same_generations

import sago_fast
from sago_fast.errors import InputError
from sago_fast.runtime.decode import GenerationSettings
from sago_fast.runtime.session import SessionOptions

PROMPTS = ["The capital of France is", "a", "Options: A. red B. green. The sky is", "x y z w v"]
CONTINUATIONS = [[[7, 8, 9], [10]], [[11]], [[12, 13], [14, 15, 16]], [[17]]]


@pytest.mark.parametrize(
    "options",
    [
        SessionOptions(memory_reuse="on"),
        SessionOptions(memory_reuse="off", prepack=False),
        SessionOptions(memory_reuse="on", prepack=False, optimization="basic"),
        SessionOptions(spinning=False),
    ],
    ids=["reuse-on", "reuse-off-unpacked", "reuse-on-unpacked-basic", "no-spinning"],
)
def test_session_options_change_no_output(checkpoints, cache_dir, options):
    default = sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir)
    other = sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir, session_options=options)
    applied = other.session.get_session_options()
    assert applied.enable_mem_reuse == (options.memory_reuse == "on")
    assert default.session.get_session_options().enable_mem_reuse is False  # "auto" on CPU
    if not options.spinning:
        assert applied.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    ids = default.tokenize(PROMPTS)
    settings = GenerationSettings(max_new_tokens=6, stop=(), stop_at_eos=False)
    expected = default.prefill(ids, CONTINUATIONS, settings)
    got = other.prefill(ids, CONTINUATIONS, settings)
    np.testing.assert_allclose(got.probe.hidden_last, expected.probe.hidden_last, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(got.probe.hidden_mean, expected.probe.hidden_mean, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(got.probe.next_logprobs, expected.probe.next_logprobs, atol=1e-4, rtol=1e-4)
    for got_scores, expected_scores in zip(
        got.continuation_logprobs, expected.continuation_logprobs, strict=True
    ):
        for a, b in zip(got_scores, expected_scores, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-4)
    if options.prepack:  # same kernels, same sums: the same greedy tokens (unpacked GEMMs sum otherwise)
        assert_same_generations(got.generations, expected.generations)
    else:
        for g, e in zip(got.generations, expected.generations, strict=True):
            assert g.token_ids[0] == e.token_ids[0]
            np.testing.assert_allclose(g.logprobs[0], e.logprobs[0], atol=1e-4)


@pytest.mark.parametrize(
    "field, value",
    [("memory_reuse", "maybe"), ("optimization", "max"), ("io_binding", True)],
)
def test_unknown_session_option_values_are_one_error(field, value):
    with pytest.raises(InputError, match=f"SessionOptions.{field} must be one of"):
        SessionOptions(**{field: value})


def test_sago_threads_sets_the_threads_of_sessions_that_leave_them_open(
    checkpoints, cache_dir, monkeypatch, tmp_path
):
    """$SAGO_THREADS is ONNX Runtime's intra-op thread count where SessionOptions leaves it at 0, and an
    explicit count wins; a bad value is one InputError, and the CLI says so before any work."""
    import os
    import subprocess
    import sys

    from sago_fast.runtime.threads import default_threads

    monkeypatch.setenv("SAGO_THREADS", "1")
    two = SessionOptions(intra_op_threads=2)
    with (
        sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir) as one,
        sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir, session_options=two) as explicit,
    ):
        assert one.session.get_session_options().intra_op_num_threads == 1
        assert explicit.session.get_session_options().intra_op_num_threads == 2
        ids = one.tokenize(PROMPTS)
        np.testing.assert_allclose(
            one.probe_ids(ids).next_logprobs, explicit.probe_ids(ids).next_logprobs, atol=1e-5, rtol=0
        )
    monkeypatch.setenv("SAGO_THREADS", "")
    assert default_threads() == 0
    for bad in ("two", "-1", "1.5", "\u00b2"):
        monkeypatch.setenv("SAGO_THREADS", bad)
        with pytest.raises(InputError, match=r"\$SAGO_THREADS must be a whole number"):
            default_threads()
    done = subprocess.run(
        [sys.executable, "-m", "sago_fast.cli.app", "status", "--db", str(tmp_path / "missing.duckdb")],
        capture_output=True,
        text=True,
        env={**os.environ, "SAGO_THREADS": "two"},
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "sago: error: $SAGO_THREADS must be a whole number of threads from 0 to 1024 (0: every core), not 'two'"
    )
