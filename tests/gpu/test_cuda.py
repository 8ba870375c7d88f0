"""On a CUDA machine (pytest --rungpu): the CUDA execution provider path against HF eager on the GPU.

fp16 probe parity tolerance: max |ORT - HF| <= 2e-2 * max |HF| per output (both in fp16 arithmetic, with
different kernels); fp32 exports on CUDA must match HF eager fp32 (TF32 off) to 1e-3 and generate the
same tokens; the decode loop runs with IOBinding on the device.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

import sago_fast
from sago_fast.checkpoints.tiny import ARCHITECTURES
from sago_fast.exporters.unified import pooled_forward
from sago_fast.runtime.batching import left_pad
from sago_fast.runtime.decode import GenerationSettings

pytestmark = pytest.mark.gpu
TEXTS = ["What is 12 + 7?", "a", "Options: A. red B. green C. blue. The sky is", "Reverse the word 'stone'."]
FP16_RELATIVE = 2e-2


@pytest.fixture(autouse=True)
def no_tf32():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def hf_pooled(checkpoint, token_ids, pad_id, dtype):
    model = (
        AutoModelForCausalLM.from_pretrained(checkpoint, dtype=dtype, attn_implementation="eager")
        .cuda()
        .eval()
    )
    ids, mask = left_pad(token_ids, pad_id)
    with torch.inference_mode():
        out = pooled_forward(model, torch.from_numpy(ids).cuda(), torch.from_numpy(mask).cuda())
    return {k: v.float().cpu().numpy() for k, v in out.items()}


@pytest.mark.parametrize("arch", ARCHITECTURES.names())
def test_fp16_cuda_probe_matches_hf_eager_fp16(arch, checkpoints, cache_dir):
    model = sago_fast.load_model(checkpoints[arch], device="cuda", cache_dir=cache_dir)
    assert model.provider == "CUDAExecutionProvider" and model.exported.manifest["dtype"] == "fp16"
    token_ids = model.tokenize(TEXTS)
    got = model.probe_ids(token_ids)
    ref = hf_pooled(checkpoints[arch], token_ids, model.pad_id, torch.float16)
    for name in ("hidden_last", "hidden_mean", "next_logprobs"):
        ours, theirs = getattr(got, name), ref[name]
        scale = np.abs(theirs).max()
        assert np.abs(ours - theirs).max() <= FP16_RELATIVE * scale, name


@pytest.mark.parametrize("arch", ["llama", "qwen2", "phi3", "gemma"])
def test_fp32_cuda_probe_and_generation_match_hf(arch, checkpoints, cache_dir):
    model = sago_fast.load_model(checkpoints[arch], device="cuda", dtype="fp32", cache_dir=cache_dir)
    assert model.engine.io_binding_device == "cuda"
    token_ids = model.tokenize(TEXTS)
    got = model.probe_ids(token_ids)
    ref = hf_pooled(checkpoints[arch], token_ids, model.pad_id, torch.float32)
    np.testing.assert_allclose(got.next_logprobs, ref["next_logprobs"], atol=1e-3, rtol=0)
    settings = GenerationSettings(max_new_tokens=10, stop=())
    generations = model.generate(TEXTS, settings)
    hf = AutoModelForCausalLM.from_pretrained(
        checkpoints[arch], dtype=torch.float32, attn_implementation="eager"
    ).cuda()
    for text, ids, generation in zip(TEXTS, token_ids, generations, strict=True):
        prompt = torch.tensor([ids]).cuda()
        with torch.inference_mode():
            out = hf.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                do_sample=False,
                max_new_tokens=10,
                pad_token_id=model.pad_id,
            )
        assert list(generation.token_ids) == out[0, len(ids) :].tolist(), text
