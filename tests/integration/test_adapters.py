"""LoRA adapters as checkpoints, against HF + peft (merged), and training-run folders of them."""

from __future__ import annotations

import json

import numpy as np
import pytest

import sago_fast
from sago_fast.checkpoints.resolve import resolve_checkpoint
from sago_fast.checkpoints.tiny import TinySize, build_tiny_checkpoint
from sago_fast.errors import CheckpointError
from tests.adapters import (
    assert_same_log_likelihoods,
    copy_member,
    make_adapter,
    merged_log_likelihoods,
    sago_log_likelihoods,
)

peft = pytest.importorskip("peft")

pytestmark = pytest.mark.xdist_group("adapters")  # module fixtures: built once, in one process

TEXTS = ["What is 12 + 7?", "Which colour is the sky? The answer is", "Reverse the word 'stone'."]
TOL = 1e-4
SIZE = TinySize(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=96)


@pytest.fixture(scope="module")
def bases(tmp_path_factory, tokenizer):
    root = tmp_path_factory.mktemp("adapter-bases")
    return {
        arch: build_tiny_checkpoint(arch, root / arch, SIZE, tokenizer=tokenizer)
        for arch in ("llama", "gpt2")
    }


@pytest.mark.parametrize(
    ("arch", "lora"),
    [
        ("llama", {"target_modules": ["q_proj", "v_proj", "down_proj"], "use_rslora": True}),
        (
            "llama",
            {
                "target_modules": ["q_proj", "k_proj", "o_proj", "gate_proj", "up_proj"],
                "rank_pattern": {"gate_proj": 2},
                "alpha_pattern": {"o_proj": 3.0},
            },
        ),
        ("gpt2", {"target_modules": ["c_attn", "c_fc"]}),  # Conv1D: fan_in_fan_out
    ],
)
def test_adapter_log_likelihoods_equal_peft_merged(arch, lora, bases, tmp_path):
    from transformers import AutoTokenizer

    adapter = make_adapter(bases[arch], tmp_path / "adapter", seed=3, **lora)
    checkpoint = resolve_checkpoint(adapter)
    assert checkpoint.source_format == "lora" and checkpoint.base.path == bases[arch].resolve()
    tok = AutoTokenizer.from_pretrained(bases[arch])
    with sago_fast.load_model(checkpoint, cache_dir=tmp_path / "cache") as model:
        ours = sago_log_likelihoods(model, tok, TEXTS)
    assert_same_log_likelihoods(ours, merged_log_likelihoods(bases[arch], adapter, tok, TEXTS), TOL)
    with sago_fast.load_model(bases[arch], cache_dir=tmp_path / "cache") as plain:
        base_nexts = plain.probe(TEXTS).next_logprobs
    nexts = np.array([next_ours for next_ours, _ in ours])
    assert np.abs(base_nexts - nexts).max() > 10 * TOL  # the adapter changed the model
    entries = [p for p in (tmp_path / "cache").iterdir() if p.is_dir() and p.name != "graphs"]
    assert len(entries) == 1  # the base's export only: the adapter adds nothing to the cache


def test_an_adapter_on_a_re_weighted_sibling_equals_peft_merged(bases, tokenizer, tmp_path):
    """The base is a sibling of an exported checkpoint (same graph, its own weights hard-linked into the
    cache entry): the adapted weights are read through that link, and equal HF + peft within 1e-4."""
    from transformers import AutoTokenizer

    cache = tmp_path / "cache"
    sago_fast.load_model(bases["llama"], cache_dir=cache).close()  # the graph's first export
    sibling = build_tiny_checkpoint("llama", tmp_path / "sibling", SIZE, seed=11, tokenizer=tokenizer)
    adapter = make_adapter(sibling, tmp_path / "adapter", seed=5, target_modules=["k_proj", "up_proj"])
    checkpoint = resolve_checkpoint(adapter, base=sibling)
    tok = AutoTokenizer.from_pretrained(sibling)
    with sago_fast.load_model(checkpoint, cache_dir=cache) as model:
        assert model.exported.manifest["graph_from"] is not None  # a re-weighted entry, not an export
        ours = sago_log_likelihoods(model, tok, TEXTS)
    assert_same_log_likelihoods(ours, merged_log_likelihoods(sibling, adapter, tok, TEXTS), TOL)


def test_an_adapter_of_another_architecture_is_refused_before_work(bases, tmp_path):
    """A ``--base`` whose shapes do not fit the adapter is one line at resolve time, not a unit failure."""
    adapter = make_adapter(bases["llama"], tmp_path / "adapter")
    other = build_tiny_checkpoint(
        "llama", tmp_path / "narrow", TinySize(hidden=32, layers=2, heads=4, kv_heads=2, intermediate=48)
    )
    with pytest.raises(CheckpointError, match=r"adapter.*\(64, 64\).*\(32, 32\)|fit") as error:
        resolve_checkpoint(adapter, base=other)
    assert "\n" not in str(error.value) and "--base" in str(error.value)


@pytest.mark.parametrize(
    ("lora", "message"),
    [
        ({"use_dora": True}, "DoRA"),
        ({"target_modules": ["embed_tokens"]}, "embedding adapter"),
        ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
        ({"bias": "lora_only"}, "'bias'"),
    ],
)
def test_unsupported_adapters_are_one_line(lora, message, bases, tmp_path):
    adapter = make_adapter(bases["llama"], tmp_path / "adapter", **lora)
    with pytest.raises(CheckpointError, match=message) as error:
        resolve_checkpoint(adapter)
    assert "\n" not in str(error.value) and "adapter" in str(error.value)


def test_the_base_comes_from_the_flag_when_the_config_names_none_here(bases, tmp_path):
    adapter = make_adapter(bases["llama"], tmp_path / "adapter")
    config_file = adapter / "adapter_config.json"
    config = json.loads(config_file.read_text())
    config["base_model_name_or_path"] = str(tmp_path / "moved-away")
    config_file.write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="moved-away") as missing:
        resolve_checkpoint(adapter)
    assert str(adapter) in str(missing.value) and "--base" in str(missing.value)  # which adapter, and the fix
    found = resolve_checkpoint(adapter, base=bases["llama"])
    assert found.base.path == bases["llama"].resolve()
    other = build_tiny_checkpoint("llama", tmp_path / "other", SIZE, seed=5)
    assert resolve_checkpoint(adapter, base=other).content_hash != found.content_hash  # base in the id


def test_run_over_a_trainer_run_folder_of_adapters(bases, tmp_path):
    """checkpoint-N folders: steps and tokens recorded, identical members evaluated once and recorded under
    both names, a truncated member skipped with one line, one export, changes between consecutive steps."""
    from sago_fast.report import write_report
    from sago_fast.run import RunConfig, run
    from sago_fast.run.pipeline import UnitsFailedError
    from sago_fast.store import Store

    run_dir = tmp_path / "run"
    make_adapter(bases["llama"], run_dir / "checkpoint-10", seed=1, step=10)
    make_adapter(bases["llama"], run_dir / "checkpoint-20", seed=2, step=20)
    copy_member(run_dir / "checkpoint-20", run_dir / "checkpoint-30", 30)
    broken = make_adapter(bases["llama"], run_dir / "checkpoint-40", seed=4, step=40)
    weights = broken / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    db, cache = tmp_path / "r.duckdb", tmp_path / "cache"
    config = RunConfig(
        models=(str(run_dir),),
        datasets=("capitals",),
        db=db,
        limit=4,
        variants_per_family=1,
        families=("typo", "option_permutation"),
        cache_dir=cache,
    )
    with pytest.raises(UnitsFailedError, match=r"checkpoint-40.*truncated") as error:
        run(config, progress=False)
    assert "\n" not in str(error.value)
    entries = [p for p in cache.iterdir() if p.is_dir() and p.name != "graphs"]
    assert len(entries) == 1  # one export: the base
    with Store(db, read_only=True) as store:
        _, models = store.query("SELECT step, tokens_seen, source_format FROM models ORDER BY step")
        _, names = store.query(
            "SELECT regexp_extract(checkpoint, '[^/]+$'), step, model_id FROM checkpoint_names ORDER BY step"
        )
        _, units = store.query("SELECT count(*) FROM units WHERE status = 'done'")
        _, changes = store.query(
            "SELECT step_from, step_to, metric, change, test, model_from, model_to FROM checkpoint_changes "
            "WHERE axis = 'accuracy'"
        )
        _, compared = store.query(
            "SELECT model_a, model_b, difference FROM model_comparisons WHERE axis = 'accuracy'"
        )
    assert models == [(10, 10000, "lora"), (20, 20000, "lora")]
    assert [n[:2] for n in names] == [("checkpoint-10", 10), ("checkpoint-20", 20), ("checkpoint-30", 30)]
    assert names[1][2] == names[2][2] and units[0][0] == 2  # identical content: one unit, two names
    by_steps = {(c[0], c[1]): c for c in changes}
    assert by_steps[(20, 30)][3] == 0.0 and by_steps[(20, 30)][4] == "identical weights"
    (a, b, difference), *_ = compared
    first = by_steps[(10, 20)]
    expected = difference if (first[6], first[5]) == (a, b) else -difference
    assert first[3] == pytest.approx(expected)
    html = write_report(db, tmp_path / "report.html").read_text(encoding="utf-8")
    assert "Not drawn: a curve over training" not in html and "training step" in html
