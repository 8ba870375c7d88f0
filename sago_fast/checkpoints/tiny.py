"""Tiny Hugging Face checkpoints built on disk with no network, for tests, the demo and benchmarks.

A byte-level BPE tokenizer is trained with ``tokenizers`` on a small corpus; models are initialised from
configs with a fixed seed and saved as safetensors.

Example::

    build_tiny_checkpoint("llama", "/tmp/tiny-llama")          # ~40k parameters
    build_tiny_checkpoint("llama", "/tmp/llama-50m", TinySize.bench_50m())
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sago_fast.registry import Registry

PAD, BOS, EOS = "<pad>", "<s>", "</s>"
SPECIAL_TOKENS = (PAD, BOS, EOS)  # ids 0, 1, 2


@dataclass(frozen=True)
class TinySize:
    """Model dimensions. Defaults give a ~40k-parameter model that exports in seconds."""

    hidden: int = 32
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 64
    max_positions: int = 128
    vocab_size: int | None = None  # None: the tokenizer's size; larger values pad the embedding

    @classmethod
    def bench_50m(cls) -> TinySize:
        """~56M-parameter Llama-style dimensions (hidden 512, 8 layers, vocab 32k) for benchmarks."""
        return cls(
            hidden=512, layers=8, heads=8, kv_heads=8, intermediate=1408, max_positions=2048, vocab_size=32000
        )

    @classmethod
    def smollm2_135m(cls) -> TinySize:
        """SmolLM2-135M's dimensions (hidden 576, 30 layers, 9 heads / 3 KV heads, vocab 49,152), random."""
        return cls(576, 30, heads=9, kv_heads=3, intermediate=1536, max_positions=2048, vocab_size=49152)

    @classmethod
    def bench_1b(cls) -> TinySize:
        """~1.07B-parameter Llama-style dimensions (hidden 2048, 20 layers, GQA 16/8 heads, vocab 32k),
        randomly initialised, for GPU throughput checks (``benchmarks/gpu_check.sh``)."""
        return cls(2048, 20, heads=16, kv_heads=8, intermediate=5632, max_positions=2048, vocab_size=32000)


ConfigFactory = Callable[[TinySize, int], dict[str, Any]]
ARCHITECTURES: Registry[ConfigFactory] = Registry("architecture")


def _hf_names(s: TinySize, vocab: int) -> dict[str, Any]:
    """The dimensions under the names most Hugging Face configs use, with the special token ids."""
    return {
        "hidden_size": s.hidden,
        "intermediate_size": s.intermediate,
        "num_hidden_layers": s.layers,
        "num_attention_heads": s.heads,
        "max_position_embeddings": s.max_positions,
        "vocab_size": vocab,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def _llama_like(s: TinySize, vocab: int) -> dict[str, Any]:
    return {**_hf_names(s, vocab), "num_key_value_heads": s.kv_heads, "tie_word_embeddings": False}


for _name in ("llama", "mistral", "qwen2", "phi3"):
    ARCHITECTURES.add(_name, _llama_like)


@ARCHITECTURES.register("gemma")
def _gemma(s: TinySize, vocab: int) -> dict[str, Any]:
    return {**_llama_like(s, vocab), "head_dim": s.hidden // s.heads, "tie_word_embeddings": True}


GPT2_NAMES = {  # the common names -> GPT-2's
    "hidden_size": "n_embd",
    "intermediate_size": "n_inner",
    "num_hidden_layers": "n_layer",
    "num_attention_heads": "n_head",
    "max_position_embeddings": "n_positions",
}


@ARCHITECTURES.register("gpt2")
def _gpt2(s: TinySize, vocab: int) -> dict[str, Any]:
    return {GPT2_NAMES.get(name, name): value for name, value in _hf_names(s, vocab).items()}


ARCHITECTURES.add("gpt_neox", _hf_names)


@ARCHITECTURES.register("falcon")
def _falcon(s: TinySize, vocab: int) -> dict[str, Any]:
    """Falcon's new decoder architecture with grouped KV heads (the Falcon-40B/180B layout; its MLP is
    4 x hidden, so ``intermediate`` is not read)."""
    names = {k: v for k, v in _hf_names(s, vocab).items() if k != "intermediate_size"}
    flags = {"new_decoder_architecture": True, "alibi": False, "bias": False, "parallel_attn": True}
    return {**names, **flags, "num_kv_heads": s.kv_heads}


DEFAULT_CORPUS = (
    "Question: What is 12 + 7? Answer: 19",
    "Q: Which is larger, 41 or 14? A: 41",
    "The capital of France is Paris. The capital of Japan is Tokyo.",
    "Options: A. red B. green C. blue D. yellow. The answer is C.",
    "Reverse the word 'stone': enots. Spell 'cat' backwards: tac.",
    "The quick brown fox jumps over the lazy dog.",
    "I think the answer is B, but please check. Let's think step by step.",
    "(a) true (b) false 1) yes 2) no i. first ii. second",
)


def train_tokenizer(corpus: Iterable[str] = DEFAULT_CORPUS, vocab_size: int = 512) -> Any:
    """Train a byte-level BPE tokenizer; returns a ``PreTrainedTokenizerFast`` (left padding, no BOS)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(corpus), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        padding_side="left",
        model_input_names=["input_ids", "attention_mask"],  # no token_type_ids
    )


def build_tiny_checkpoint(
    arch: str,
    out_dir: str | os.PathLike[str],
    size: TinySize = TinySize(),
    *,
    seed: int = 0,
    tokenizer: Any = None,
) -> Path:
    """Write a randomly initialised ``arch`` checkpoint (safetensors + tokenizer) to ``out_dir``.

    The directory is written under a temporary name and renamed, so it is either complete or absent.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    factory = ARCHITECTURES.get(arch)
    tokenizer = tokenizer if tokenizer is not None else train_tokenizer()
    vocab = max(size.vocab_size or 0, len(tokenizer))
    config = AutoConfig.for_model(arch, **factory(size, vocab))
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    finally:
        torch.random.set_rng_state(generator_state)
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
