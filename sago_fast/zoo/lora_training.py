"""A LoRA training run: fine-tune low-rank adapters of a base model on the built-in suites, saving a
Hugging Face Trainer-style run folder (``checkpoint-N/`` with the adapter and ``trainer_state.json``).

It is what a user's PEFT run leaves behind, made locally in seconds to a minute on CPU, so that
``sago run --model RUN_DIR`` can be shown and tested on adapters over a real model. Needs ``peft``
(``pip install peft``; the ``dev`` extra has it). The training texts are the zoo's (:mod:`.train`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sago_fast.errors import InputError
from sago_fast.zoo.train import _encode, collate, render_training_text, suite_examples

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoraRunConfig:
    """What the adapter run trains: ``rank``/``alpha`` LoRA on ``targets`` (module names), ``save_steps``
    optimiser steps with batches of ``batch_size`` prompts of ``suites`` (``examples_per_suite`` each,
    rendered with ``train_templates``)."""

    suites: tuple[str, ...] = ("capitals", "arithmetic", "comparison", "letters")
    examples_per_suite: int = 40
    train_templates: tuple[int, ...] = (0, 1)
    save_steps: tuple[int, ...] = (2, 4, 6)
    batch_size: int = 4
    learning_rate: float = 2e-3
    rank: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    seed: int = 0


def train_lora_run(
    base: str | os.PathLike[str], out: str | os.PathLike[str], config: LoraRunConfig = LoraRunConfig()
) -> list[Path]:
    """Train adapters of ``base`` (a checkpoint folder or ``.gguf`` file) and save ``out/checkpoint-N`` at
    each of ``config.save_steps``; the folder is written under a temporary name and renamed. Each
    adapter's ``base_model_name_or_path`` is ``base`` as given, so ``sago run -m OUT`` finds it."""
    try:
        import peft
    except ImportError:
        raise InputError("training LoRA adapters needs peft (pip install peft)") from None
    from sago_fast.checkpoints.resolve import resolve_checkpoint

    if not config.save_steps or min(config.save_steps) < 1:
        raise InputError("save_steps must hold positive step numbers")
    with _quiet_libraries():
        return _train(peft, base, Path(out), config, resolve_checkpoint(base).path)


@contextmanager
def _quiet_libraries() -> Iterator[None]:
    """No transformers loading bar and no PEFT UserWarnings (e.g. that the base, a ``.gguf`` file, has no
    config.json beside it) while the run trains: sago's own log says what happens."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=UserWarning, module=r"peft(\.|$)")
            yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def _train(
    peft: Any, base: str | os.PathLike[str], root: Path, config: LoraRunConfig, folder: Path
) -> list[Path]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    examples = suite_examples(config.suites, config.examples_per_suite, config.seed)
    encoded = _encode(
        tokenizer, [render_training_text(e, t) for e in examples for t in config.train_templates]
    )
    torch.manual_seed(config.seed)
    base_model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    lora = peft.LoraConfig(
        r=config.rank,
        lora_alpha=config.alpha,  # type: ignore[arg-type]  # PEFT reads a float (alpha / r) though typed int
        target_modules=list(config.targets),
        lora_dropout=0.0,
    )
    adapted: Any = peft.get_peft_model(base_model, lora)
    adapted.peft_config["default"].base_model_name_or_path = str(base)
    adapted.train()
    optimizer = torch.optim.AdamW(
        [p for p in adapted.parameters() if p.requires_grad], lr=config.learning_rate
    )
    rng = np.random.default_rng(config.seed)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    history: list[dict[str, float | int]] = []
    tokens_seen = 0
    try:
        for step in range(1, max(config.save_steps) + 1):
            batch = [encoded[i] for i in rng.integers(0, len(encoded), size=config.batch_size)]
            input_ids, labels, mask = collate(batch, pad)
            loss = adapted(input_ids=input_ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            tokens_seen += int(mask.sum())
            history.append({"step": step, "loss": float(loss.detach())})
            if step in config.save_steps:
                member = tmp / f"checkpoint-{step}"
                adapted.save_pretrained(member, safe_serialization=True)
                state = {"global_step": step, "num_input_tokens_seen": tokens_seen, "log_history": history}
                (member / "trainer_state.json").write_text(json.dumps(state, indent=2), encoding="utf-8")
                log.info("lora: step %d loss %.3f -> %s", step, history[-1]["loss"], member.name)
        if root.exists():
            shutil.rmtree(root)
        os.replace(tmp, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [root / f"checkpoint-{step}" for step in sorted(config.save_steps)]
