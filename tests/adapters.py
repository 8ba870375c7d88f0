"""Test helpers: PEFT LoRA adapters of a local base, saved as PEFT saves them (the reference is peft)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

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
