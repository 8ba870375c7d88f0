"""A prompt longer than the model is cut from the left (lm-eval's rule) and recorded; it does not fail the unit."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from sago_fast.answers.scoring import encode_pair, fit_to_context
from sago_fast.run import RunConfig, run
from sago_fast.run.pipeline import UnitsFailedError
from sago_fast.store import Store
from sago_fast.store.queries import summary_rows
from sago_fast.store.reads import RunReads

LIMIT = 512  # the test checkpoints' positions (conftest.TEST_SIZE)
OPTIONS = ["red", "green light", "blue"]


def test_fit_to_context_keeps_the_last_tokens():
    prompts = [list(range(10)), list(range(4)), list(range(10))]
    kept, cut = fit_to_context(prompts, [3, 3, 9], 8)
    assert kept == [list(range(5, 10)), list(range(4)), [9]]  # room 9 > limit: one token is kept
    assert cut == [5, 0, 9]
    assert fit_to_context(prompts, [3, 3, 9], None) == (prompts, [0, 0, 0])


def _dataset(path, questions):
    rows = [{"id": f"q{i}", "question": q, "options": OPTIONS, "answer": 1} for i, q in enumerate(questions)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _hf_loglik(hf, ids, cont):
    with torch.no_grad():
        logp = torch.log_softmax(hf(torch.tensor([ids + cont])).logits[0].float(), -1)
    return sum(logp[len(ids) - 1 + k, t].item() for k, t in enumerate(cont))


def test_a_long_item_is_cut_recorded_and_scored_as_lm_eval(tmp_path, checkpoints, cache_dir):
    long_question = " ".join(f"word{i}" for i in range(700)) + " Which colour?"
    data = _dataset(tmp_path / "mixed.jsonl", ["Which colour is grass?", long_question, "Sky colour?"])
    db = tmp_path / "r.duckdb"
    config = RunConfig(
        models=(str(checkpoints["llama"]),),
        datasets=(str(data),),
        db=db,
        families=("typo",),
        variants_per_family=1,
        cache_dir=cache_dir,
        stats=False,
    )
    result = run(config, progress=False)
    assert result.units[0].n_variants == 6
    with Store(db, read_only=True) as store:
        _, rows = store.query(
            "SELECT o.example_id, v.is_canonical, o.replicate, o.n_prompt_tokens, o.prompt_tokens_cut, "
            "v.prompt, m.option_scores FROM outputs o JOIN variants v USING (dataset_id, variant_id) "
            "JOIN mode_answers m ON m.variant_id = o.variant_id AND m.replicate = o.replicate "
            "AND m.answer_mode = 'cloze' ORDER BY o.example_id, v.is_canonical, o.replicate"
        )
        columns, summary = summary_rows(store, result.run_id)
        counted = RunReads(store, result.run_id).prompts_cut()  # what `sago stats` says
    cut = {(r[0], r[1], r[2]): r[4] for r in rows}
    assert all(n == 0 for (example, _, _), n in cut.items() if example != "q1")
    assert all(n > 0 for (example, _, _), n in cut.items() if example == "q1")
    assert columns[-1] == "prompts_cut" and summary[0][-1] == 2  # both long renderings, replicate 0
    assert (counted["n"], counted["replicates"]) == (sum(n > 0 for n in cut.values()), 1) == (3, 1)

    tokenizer = AutoTokenizer.from_pretrained(checkpoints["llama"])
    hf = AutoModelForCausalLM.from_pretrained(
        checkpoints["llama"], dtype=torch.float32, attn_implementation="eager"
    )
    _, _, _, n_tokens, n_cut, prompt, scores = next(r for r in rows if r[0] == "q1" and r[1] and r[2] == 0)
    pairs = [encode_pair(tokenizer, prompt, " " + option) for option in OPTIONS]
    longest = max(len(cont) for _, cont in pairs)
    full = pairs[0][0]
    assert n_cut == len(full) - (LIMIT + 1 - longest) and n_tokens == LIMIT + 1 - longest
    for (ctx, cont), score in zip(pairs, scores, strict=True):
        assert ctx == full
        np.testing.assert_allclose(score, _hf_loglik(hf, ctx[n_cut:], cont), atol=1e-4)
        if len(cont) == longest:  # lm-eval: the last LIMIT + 1 tokens of context + continuation
            window = (ctx + cont)[-(LIMIT + 1) :]
            np.testing.assert_allclose(score, _hf_loglik(hf, window[: -len(cont)], cont), atol=1e-4)


def test_a_dataset_of_only_long_items_is_cut_as_lm_eval_cuts_it_and_said_once(
    tmp_path, checkpoints, cache_dir, caplog
):
    """As ``sago lm-eval`` does on the same items: every prompt is cut from its left, and one warning says
    so before any work (no refusal in one entry point and cutting in the other)."""
    long_question = " ".join(f"word{i}" for i in range(700))
    data = _dataset(tmp_path / "long.jsonl", [long_question, long_question + " again"])
    config = _typo_run(checkpoints, data, tmp_path, cache_dir)
    with caplog.at_level(logging.WARNING):
        run(config, progress=False)
    said = [r.getMessage() for r in caplog.records if "every prompt is longer" in r.getMessage()]
    assert (
        len(said) == 1 and "dataset 'long': every prompt is longer than the model's 512 positions" in said[0]
    )
    with Store(tmp_path / "r.duckdb", read_only=True) as store:
        _, rows = store.query("SELECT count(*), min(prompt_tokens_cut) FROM outputs")
    assert rows[0][0] == 6 and rows[0][1] > 0


def test_an_option_longer_than_the_model_is_refused_before_any_work_naming_its_item(
    tmp_path, checkpoints, cache_dir
):
    rows = [{"id": f"q{i}", "question": f"Colour {i}?", "options": OPTIONS, "answer": 1} for i in range(40)]
    rows[34]["options"] = ["red", " ".join(f"w{i}" for i in range(600)), "blue"]
    data = tmp_path / "forty.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = _typo_run(checkpoints, data, tmp_path, cache_dir, chunk_memory_mb=1)  # many chunks: before,
    # 34 items were committed when it failed
    with pytest.raises(
        UnitsFailedError, match=r"example 'q34': option 2 is \d+ tokens, as long as the model's 512 positions"
    ):
        run(config, progress=False)
    with Store(tmp_path / "r.duckdb", read_only=True) as store:
        assert store.query("SELECT count(*) FROM outputs")[1][0][0] == 0


def _typo_run(checkpoints, data, tmp_path, cache_dir, **more):
    """The llama checkpoint on ``data``, one typo rendering an item, into ``tmp_path/r.duckdb``."""
    return RunConfig(
        models=(str(checkpoints["llama"]),),
        datasets=(str(data),),
        db=tmp_path / "r.duckdb",
        families=("typo",),
        variants_per_family=1,
        cache_dir=cache_dir,
        stats=False,
        **more,
    )
