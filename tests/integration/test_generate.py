"""Greedy generation through the ONNX decode graph equals HF ``generate(do_sample=False)`` token for token."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from assertions import assert_same_generations
from transformers import AutoModelForCausalLM, AutoTokenizer

import sago_fast
from sago_fast.checkpoints.tiny import ARCHITECTURES
from sago_fast.errors import InputError
from sago_fast.runtime.decode import GenerationSettings, cut_at_stop

PROMPTS = [
    "Question: What is the last letter of the word 'frog'?\nAnswer:",
    "a",
    "Options: A. red B. green C. blue D. yellow. Which colour is the sky? The answer is",
    "Reverse the word 'stone'.",
    "What is 12 + 7?",
]
NEW = 12


def hf_greedy(checkpoint, prompt, max_new_tokens):
    """HF eager greedy decoding of one prompt alone: (generated ids, their log-probs)."""
    tok = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32, attn_implementation="eager")
    enc = tok(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **enc,
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
            output_scores=True,
            return_dict_in_generate=True,
        )
    ids = out.sequences[0, enc["input_ids"].shape[1] :].tolist()
    logprobs = [torch.log_softmax(s[0].float(), -1)[t].item() for s, t in zip(out.scores, ids, strict=True)]
    return ids, logprobs


@pytest.mark.parametrize("arch", ARCHITECTURES.names())
def test_batched_greedy_equals_hf_generate(arch, checkpoints, cache_dir):
    model = sago_fast.load_model(checkpoints[arch], device="cpu", cache_dir=cache_dir)
    settings = GenerationSettings(max_new_tokens=NEW, stop=())
    batched = model.generate(PROMPTS, settings)
    eos = set(model.exported.manifest["eos_token_ids"])
    for prompt, got in zip(PROMPTS, batched, strict=True):
        ids, logprobs = hf_greedy(checkpoints[arch], prompt, NEW)
        assert list(got.token_ids) == ids, prompt
        np.testing.assert_allclose(got.logprobs, logprobs, atol=1e-4, rtol=0)
        assert got.stop_reason == ("eos" if ids[-1] in eos else "length")
        text_ids = ids[:-1] if got.stop_reason == "eos" else ids
        assert got.text == model.tokenizer.decode(text_ids, skip_special_tokens=True)


def test_stop_strings_cut_the_text_and_free_the_row(checkpoints, cache_dir):
    model = sago_fast.load_model(checkpoints["llama"], device="cpu", cache_dir=cache_dir)
    free = model.generate(PROMPTS, GenerationSettings(max_new_tokens=NEW, stop=()))
    # a stop string taken from the middle of the first prompt's free-running text
    first = free[0].text
    assert len(first) >= 4, "the test needs a generation of a few characters"
    stop = first[2:4]
    stopped = model.generate(PROMPTS, GenerationSettings(max_new_tokens=NEW, stop=(stop,)))
    for unstopped, got in zip(free, stopped, strict=True):
        where = unstopped.text.find(stop)
        if where < 0:  # rows the stop string never hits run exactly as before
            assert got == unstopped
            continue
        assert got.stop_reason == "stop"
        assert got.text == unstopped.text[:where]
        # generation ended at the first token whose text reveals the stop string
        assert got.token_ids == unstopped.token_ids[: len(got.token_ids)]
        shorter = model.tokenizer.decode(list(got.token_ids[:-1]), skip_special_tokens=True)
        assert stop not in shorter
    assert stopped[0].stop_reason == "stop"


def test_each_prompt_alone_equals_the_batch(checkpoints, cache_dir):
    model = sago_fast.load_model(checkpoints["qwen2"], device="cpu", cache_dir=cache_dir)
    settings = GenerationSettings(max_new_tokens=6, stop=(".",))
    batched = model.generate(PROMPTS, settings)
    for prompt, got in zip(PROMPTS, batched, strict=True):
        assert_same_generations(model.generate([prompt], settings), [got])


def test_prompt_plus_new_tokens_must_fit_the_positions(checkpoints, cache_dir):
    model = sago_fast.load_model(checkpoints["llama"], device="cpu", cache_dir=cache_dir)
    limit = model.max_positions
    n_prompt = len(model.tokenize(["a b c d e f"])[0])
    with pytest.raises(InputError, match=r"text 0: .*new tokens, longer than the model's"):
        model.generate(["a b c d e f"], GenerationSettings(max_new_tokens=limit - n_prompt + 1))


def test_cut_at_stop():
    assert cut_at_stop("Paris\nQuestion", ["\n"]) == ("Paris", True)
    assert cut_at_stop("a. b\n", ["\n", "."]) == ("a", True)
    assert cut_at_stop("no stop here", ["\n"]) == ("no stop here", False)
    assert cut_at_stop("", ["x"]) == ("", False)


def test_settings_are_checked():
    with pytest.raises(InputError):
        GenerationSettings(max_new_tokens=0)
    with pytest.raises(InputError):
        GenerationSettings(stop=("",))
