"""`sago run` on a generation task: generations, answers and P(gold) against HF eager; all four axes."""

from __future__ import annotations

from collections import Counter
from itertools import combinations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from sago_fast.answers.free_answers import extract_answer
from sago_fast.answers.scoring import encode_pair
from sago_fast.kernels.agreement import answer_key
from sago_fast.run import RunConfig, run
from sago_fast.store import Store

pytestmark = pytest.mark.xdist_group("run_generation")  # module fixtures: built once, in one process

NEW = 6


@pytest.fixture(scope="module")
def gen_run(tmp_path_factory, checkpoints, cache_dir):
    db = tmp_path_factory.mktemp("gen") / "g.duckdb"
    config = RunConfig(
        models=(str(checkpoints["llama"]),),
        datasets=("letters",),
        db=db,
        limit=4,
        variants_per_family=1,
        families=("typo", "casing", "template", "separator"),
        design="full",  # every family of every example: the renderings compared with HF one by one
        max_new_tokens=NEW,
        stop=("\n", "?"),
        cache_dir=cache_dir,
    )
    return db, run(config, progress=False), checkpoints["llama"]


def hf_reference(checkpoint, prompt, references):
    """HF eager greedy text (cut at the first stop string) and max P(" " + reference | prompt)."""
    tok = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32, attn_implementation="eager")
    enc = tok(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=NEW, pad_token_id=tok.pad_token_id)
    text = tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    cuts = [i for i in (text.find("\n"), text.find("?")) if i >= 0]
    text = text[: min(cuts)] if cuts else text
    best = -np.inf
    for reference in references:
        ctx, cont = encode_pair(tok, prompt, " " + reference)
        ids = torch.tensor([ctx + cont])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0].double(), -1)
        best = max(best, sum(logp[len(ctx) - 1 + i, t].item() for i, t in enumerate(cont)))
    return text, float(np.exp(best))


def test_generations_answers_and_p_gold_match_hf(gen_run):
    db, result, checkpoint = gen_run
    with Store(db, read_only=True) as store:
        _, rows = store.query(
            """
            SELECT v.prompt, o.generation, o.answer, o.correct, o.p_gold, o.replicate, e.answers
            FROM outputs o JOIN variants v USING (dataset_id, variant_id)
            JOIN examples e ON e.dataset_id = o.dataset_id AND e.example_id = o.example_id
            WHERE o.run_id = $run AND (v.is_canonical OR v.family = 'typo')
            ORDER BY o.variant_id, o.replicate
            """,
            {"run": result.run_id},
        )
    assert len(rows) == 4 * 3  # canonical (replicates 0 and 1) + typo, for 4 examples
    for prompt, generation, answer, correct, p_gold, _replicate, references in rows:
        text, ref_p_gold = hf_reference(checkpoint, prompt, references)
        assert generation == text
        assert answer == extract_answer(text)
        assert correct == (
            answer_key(answer) in {answer_key(r) for r in references} and bool(answer_key(answer))
        )
        assert p_gold == pytest.approx(ref_p_gold, rel=1e-3, abs=1e-12)


def test_all_four_axes_for_every_example(gen_run):
    db, result, _ = gen_run
    with Store(db, read_only=True) as store:
        _, rows = store.query(
            "SELECT example_id, list(DISTINCT axis ORDER BY axis) FROM item_scores WHERE run_id = $run GROUP BY 1",
            {"run": result.run_id},
        )
        metrics = {
            r[0]
            for r in store.query(
                "SELECT DISTINCT metric FROM item_scores WHERE run_id = $r", {"r": result.run_id}
            )[1]
        }
    assert len(rows) == 4
    for _, axes in rows:
        assert axes == ["activation", "confidence", "generation", "mirroring"]
    assert {
        "answer_disagreement",
        "token_f1_disagreement",
        "next_token_js",
        "p_gold_sd",
        "prompt_echo",
    } <= metrics


def test_token_f1_disagreement_from_stored_generations(gen_run):
    db, result, checkpoint = gen_run
    tok = AutoTokenizer.from_pretrained(checkpoint)
    with Store(db, read_only=True) as store:
        _, rows = store.query(
            """
            SELECT o.example_id, list(o.generation ORDER BY v.is_canonical DESC, o.variant_id)
            FROM outputs o JOIN variants v USING (dataset_id, variant_id)
            WHERE o.run_id = $run AND o.replicate = 0 AND v.meaning_preserving GROUP BY 1
            """,
            {"run": result.run_id},
        )
        stored = dict(
            store.query(
                """SELECT example_id, value FROM item_scores WHERE run_id = $run
                   AND metric = 'token_f1_disagreement' AND family IS NULL""",
                {"run": result.run_id},
            )[1]
        )

    def f1(a, b):
        if not a and not b:
            return 1.0
        common = sum((Counter(a) & Counter(b)).values())
        return 0.0 if common == 0 else 2 * common / (len(a) + len(b))

    for example_id, generations in rows:
        ids = [tok(g, add_special_tokens=False)["input_ids"] for g in generations]
        expected = 1 - np.mean([f1(a, b) for a, b in combinations(ids, 2)])
        assert stored[example_id] == pytest.approx(expected)
