"""`sago run`: 3 checkpoints × 2 datasets, all four axes per example, HF-eager parity of MC answers, bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from sago_fast.answers.scoring import encode_pair
from sago_fast.errors import InputError, StoreError
from sago_fast.run import RunConfig, run
from sago_fast.store import Store

AXES = {"generation", "activation", "confidence", "mirroring"}


def test_every_example_has_all_four_axes(run_db):
    db, result = run_db
    assert len(result.units) == 6
    with Store(db, read_only=True) as store:
        _, rows = store.query(
            """
            SELECT s.model_id, s.dataset_id, s.example_id, list(DISTINCT s.axis ORDER BY s.axis)
            FROM item_scores s WHERE run_id = $run GROUP BY ALL
            """,
            {"run": result.run_id},
        )
        # activation scores live per layer in layer_scores
        _, layer_rows = store.query(
            "SELECT model_id, dataset_id, example_id FROM layer_scores WHERE run_id = $run GROUP BY ALL",
            {"run": result.run_id},
        )
        status = store.query("SELECT status FROM runs WHERE run_id = $run", {"run": result.run_id})[1]
    assert status == [("done",)]
    assert len(rows) == 3 * 2 * 5 and len(layer_rows) == 3 * 2 * 5
    for row in rows:
        assert {"generation", "confidence", "mirroring"} <= set(row[3])
    with Store(db, read_only=True) as store:
        axes = {r[0] for r in store.query("SELECT DISTINCT axis FROM item_scores")[1]}
        axes |= (
            {"activation"}
            if store.query("SELECT count(*) FROM layer_scores WHERE metric = 'dispersion'")[1][0][0]
            else set()
        )
    assert axes == AXES


def test_rows_are_consistent(run_db):
    db, result = run_db
    with Store(db, read_only=True) as store:
        n_variants = store.query("SELECT count(*) FROM variants")[1][0][0]
        n_outputs = store.query("SELECT count(*) FROM outputs WHERE run_id = $r", {"r": result.run_id})[1][0][
            0
        ]
        n_canonical = store.query("SELECT count(*) FROM variants WHERE is_canonical")[1][0][0]
        assert n_outputs == 3 * (n_variants + n_canonical)  # replicate 1 re-runs canonical variants
        # the replicate agrees with the main run up to float noise (answers identical, tiny distances)
        _, reps = store.query(
            """
            SELECT a.answer_index = b.answer_index, abs(a.p_gold - b.p_gold)
            FROM outputs a JOIN outputs b USING (run_id, model_id, dataset_id, variant_id)
            WHERE a.replicate = 0 AND b.replicate = 1
            """
        )
        assert len(reps) == 3 * n_canonical and all(r[0] and r[1] < 1e-4 for r in reps)
        assert (
            store.query("SELECT max(value) FROM layer_scores WHERE metric = 'replicate_distance'")[1][0][0]
            < 1e-4
        )
        assert store.query("SELECT count(*) FROM models")[1][0][0] == 3
        bad = store.query(
            "SELECT count(*) FROM outputs WHERE p_gold < 0 OR p_gold > 1 OR NOT (answer_index BETWEEN 0 AND 3)"
        )[1][0][0]
        assert bad == 0
        versions = json.loads(store.query("SELECT versions_json FROM runs")[1][0][0])
        assert (
            "onnxruntime-gpu" in versions
            and store.query("SELECT provider FROM runs")[1][0][0] == "CPUExecutionProvider"
        )


def hf_option_answers(checkpoint, prompts_and_options):
    tok = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    answers = []
    for prompt, options in prompts_and_options:
        scores = []
        for option in options:
            ctx, cont = encode_pair(tok, prompt, " " + option)
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([ctx + cont])).logits[0].float(), -1)
            scores.append(sum(float(logp[len(ctx) - 1 + j, t]) for j, t in enumerate(cont)))
        answers.append(int(np.argmax(scores)))
    return answers


def test_canonical_answers_match_hf_eager_lm_eval_scoring(run_db, checkpoints):
    db, result = run_db
    with Store(db, read_only=True) as store:
        _, rows = store.query(
            """
            SELECT v.prompt, e.options, o.answer_index, o.correct, e.answer_index
            FROM outputs o
            JOIN variants v ON v.dataset_id = o.dataset_id AND v.variant_id = o.variant_id
            JOIN examples e ON e.dataset_id = o.dataset_id AND e.example_id = o.example_id
            JOIN models m ON m.model_id = o.model_id
            WHERE v.is_canonical AND o.replicate = 0 AND m.model_type = 'llama' AND o.run_id = $run
            ORDER BY o.dataset_id, o.example_id
            """,
            {"run": result.run_id},
        )
    hf = hf_option_answers(checkpoints["llama"], [(r[0], r[1]) for r in rows])
    assert [r[2] for r in rows] == hf
    assert np.mean([r[3] for r in rows]) == np.mean([a == r[4] for a, r in zip(hf, rows, strict=True)])


def test_sql_cookbook_queries_run(run_db):
    """Every query of the README's SQL cookbook runs as written and returns rows."""
    db, _ = run_db
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## SQL cookbook", 1)[1].split("\n## ", 1)[0]
    queries = re.findall(r"```sql\n(.*?)```", section, flags=re.S)
    assert len(queries) >= 8
    with Store(db, read_only=True) as store:
        for sql in queries:
            columns, rows = store.query(sql)
            assert columns and rows, sql


def test_bad_inputs(tmp_path, checkpoints, cache_dir):
    db = tmp_path / "r.duckdb"
    with pytest.raises(InputError, match="did you mean 'capitals'"):
        run(RunConfig(models=(str(checkpoints["llama"]),), datasets=("capitols",), db=db), progress=False)
    data = tmp_path / "bad.jsonl"
    data.write_text('{"id": "1", "question": "Q?", "options": ["a", "b"], "answer": 9}\n')
    with pytest.raises(InputError, match=r"bad\.jsonl:1: field 'answer'"):
        run(RunConfig(models=(str(checkpoints["llama"]),), datasets=(str(data),), db=db), progress=False)
    assert not db.exists()  # nothing was written for bad input


def test_locked_database(locked_db, checkpoints, monkeypatch):
    monkeypatch.setenv("SAGO_DB_WAIT", "1")
    with pytest.raises(StoreError, match="still held by PID"):
        run(
            RunConfig(models=(str(checkpoints["llama"]),), datasets=("comparison",), db=locked_db, limit=2),
            progress=False,
        )


def test_yaml_config_and_cli(tmp_path, checkpoints, cache_dir):
    config = tmp_path / "run.yaml"
    db = tmp_path / "y.duckdb"
    config.write_text(
        f"models: [{checkpoints['qwen2']}]\ndatasets: comparison\ndb: {db}\nlimit: 3\nvariants_per_family: 1\n"
        f"families: [pair_swap, typo]\ncache_dir: {cache_dir}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "sago_fast.cli.app", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "comparison" in proc.stdout and str(db.resolve()) in proc.stdout
    with Store(db, read_only=True) as store:
        families = {r[0] for r in store.query("SELECT DISTINCT family FROM variants")[1]}
    assert families == {"canonical", "pair_swap", "typo"}
    (tmp_path / "bad.yaml").write_text("models: [x]\ndatasets: [comparison]\ndb: x.duckdb\nbogus: 1\n")
    bad = subprocess.run(
        [sys.executable, "-m", "sago_fast.cli.app", "run", "--config", str(tmp_path / "bad.yaml")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "unknown key(s) bogus" in bad.stderr


def test_ctrl_c_in_the_statistics_leaves_the_run_unscored_and_sago_stats_finishes_it(
    tmp_path, checkpoints, cache_dir, monkeypatch
):
    """Every unit is kept, the run is marked ``unscored`` (not ``done`` with empty statistics), the error
    says what happened and how to finish, and ``sago stats`` computes them and marks the run ``done``."""
    import sago_fast.stats as stats_module
    from sago_fast.errors import Interrupted

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    db = tmp_path / "r.duckdb"
    config = RunConfig(
        models=(str(checkpoints["llama"]),),
        datasets=("capitals",),
        db=db,
        limit=3,
        variants_per_family=1,
        families=("typo",),
        cache_dir=cache_dir,
    )
    with monkeypatch.context() as patch:
        patch.setattr(stats_module, "run_stats", interrupted)
        with pytest.raises(Interrupted, match=r"1 units? .*kept.*unscored.*sago stats --db"):
            run(config, progress=False)
    with Store(db, read_only=True) as store:
        assert store.query("SELECT status FROM runs")[1] == [("unscored",)]
        assert store.query("SELECT count(*) FROM units WHERE status = 'done'")[1] == [(1,)]
        assert not store.query("SELECT count(*) FROM model_scores")[1][0][0]
    done = subprocess.run(
        [sys.executable, "-m", "sago_fast.cli.app", "stats", "--db", str(db)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    with Store(db, read_only=True) as store:
        assert store.query("SELECT status FROM runs")[1] == [("done",)]
        assert store.query("SELECT count(*) FROM model_scores")[1][0][0] > 0


def test_a_skipped_training_run_member_still_prints_the_summary(tmp_path, tokenizer, cache_dir):
    """A broken member is skipped with one error line; the members that ran are summarised on stdout."""
    from sago_fast.checkpoints.tiny import TinySize, build_tiny_checkpoint

    size = TinySize(hidden=32, layers=1, heads=2, kv_heads=1, intermediate=48)
    run_dir = tmp_path / "run"
    build_tiny_checkpoint("llama", run_dir / "step-1", size, seed=1, tokenizer=tokenizer)
    broken = build_tiny_checkpoint("llama", run_dir / "step-2", size, seed=2, tokenizer=tokenizer)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64])
    db = tmp_path / "r.duckdb"
    args = [
        "run",
        "-m",
        str(run_dir),
        "-d",
        "capitals",
        "--limit",
        "2",
        "-k",
        "1",
        "-F",
        "typo",
        "--db",
        str(db),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "sago_fast.cli.app", *args, "--cache-dir", str(cache_dir)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "step-2" in next(line for line in done.stderr.splitlines() if line.startswith("sago: error:"))
    assert "step-1" in done.stdout and "capitals" in done.stdout  # the summary of the member that ran
    assert "1 unit run" in done.stdout


def test_an_undefined_figure_prints_null_never_nan(tmp_path):
    """One example: no between-example distance, so no dispersion (never NaN): the summary says NULL."""
    zoo = Path(__file__).resolve().parents[2] / "sago_fast" / "zoo" / "shipped" / "step-01200"
    db = tmp_path / "one.duckdb"
    args = ["run", "-m", str(zoo), "-d", "capitals", "--limit", "1", "-k", "1", "-F", "typo", "--db", str(db)]
    done = subprocess.run(
        [sys.executable, "-m", "sago_fast.cli.app", *args, "--cache-dir", str(tmp_path / "cache")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    header, _, row = done.stdout.splitlines()[:3]
    assert row.split()[header.split().index("dispersion")] == "NULL"
    assert "nan" not in done.stdout.lower()
    with Store(db, read_only=True) as store:
        assert not store.query("SELECT count(*) FROM layer_scores WHERE metric = 'dispersion'")[1][0][0]
