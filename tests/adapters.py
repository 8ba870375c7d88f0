"""Test helpers: PEFT LoRA adapters of a local base, saved as PEFT saves them (the reference is peft)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch


def make_adapter(base: Path, out: Path, *, seed: int = 0, step: int | None = None, **lora: Any) -> Path:
    """A LoRA adapter of ``base`` with random (non-zero) factors, saved with ``save_pretrained``; with
    ``step``, a ``trainer_state.json`` as the HF Trainer writes beside it. ``lora``: LoraConfig fields."""
    import peft
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    settings = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"], "init_lora_weights": False}
    wrapped = peft.get_peft_model(model, peft.LoraConfig(**{**settings, **lora}))
    wrapped.save_pretrained(out, safe_serialization=True)
    if step is not None:
        state = {"global_step": step, "num_input_tokens_seen": 1000 * step, "log_history": []}
        (out / "trainer_state.json").write_text(json.dumps(state), encoding="utf-8")
    return out


def merged_reference(base: Path, adapter: Path) -> Any:
    """HF + peft: the base with ``adapter`` merged into its weights (fp32, eager attention), in eval mode."""
    import peft
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, attn_implementation="eager")
    return peft.PeftModel.from_pretrained(model, adapter).merge_and_unload().eval()


def copy_member(source: Path, target: Path, step: int) -> Path:
    """The same adapter saved again at another step (identical weights, another trainer state)."""
    shutil.copytree(source, target)
    state = {"global_step": step, "log_history": []}
    (target / "trainer_state.json").write_text(json.dumps(state), encoding="utf-8")
    return target


def sago_log_likelihoods(model: Any, tok: Any, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per text, sago's next-token log-probs after it and log P(each token but the first | before it)."""
    ids = [tok(t)["input_ids"] for t in texts]
    targets = model.target_logprobs(ids, [len(i) - 1 for i in ids])
    return list(zip(model.probe(texts).next_logprobs, targets, strict=True))


def merged_log_likelihoods(
    base: Path, adapter: Path, tok: Any, texts: list[str]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The same figures from HF + peft with ``adapter`` merged into ``base`` (float64 log-softmax)."""
    merged = merged_reference(base, adapter)
    out = []
    for text in texts:
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            logp = torch.log_softmax(merged(**enc).logits[0].double(), -1)
        ids = enc["input_ids"][0]
        out.append((logp[-1].numpy(), logp[torch.arange(len(ids) - 1), ids[1:]].numpy()))
    return out


def assert_same_log_likelihoods(ours: list, reference: list, atol: float) -> None:
    for (next_ours, cont_ours), (next_ref, cont_ref) in zip(ours, reference, strict=True):
        np.testing.assert_allclose(next_ours, next_ref, atol=atol, rtol=0)
        np.testing.assert_allclose(cont_ours, cont_ref, atol=atol, rtol=0)
