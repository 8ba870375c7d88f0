"""Train tiny Llama-style models on the built-in suites, rendered with only some
templates and formats, and save checkpoints along the way (so stability can differ and change over training).

Each training text is a rendered prompt followed by `` <gold option content></s>``; the loss covers the
answer tokens only. Where a zoo comes from (the package ships the default one) is :mod:`sago_fast.zoo.sources`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from sago_fast.checkpoints.tiny import TinySize, build_tiny_checkpoint, train_tokenizer
from sago_fast.datasets.builtin import SUITES
from sago_fast.errors import InputError
from sago_fast.types import Example
from sago_fast.variants.base import RenderSpec
from sago_fast.variants.render import render

log = logging.getLogger(__name__)

ZOO_FILE = "zoo.json"


@dataclass(frozen=True)
class ZooConfig:
    """What the zoo trains. Defaults take about a minute on 2 CPU cores.

    train_templates: instruction templates used in training (others stay unseen); enumerator and
    separator are fixed to the canonical ones. save_steps: optimizer steps at which checkpoints are saved.
    """

    suites: tuple[str, ...] = ("capitals", "arithmetic", "comparison", "letters")
    examples_per_suite: int = 200
    train_templates: tuple[int, ...] = (0, 1)
    save_steps: tuple[int, ...] = (150, 500, 1200)
    batch_size: int = 32
    learning_rate: float = 3e-3
    hidden: int = 96
    layers: int = 3
    heads: int = 4
    vocab_size: int = 1024
    seed: int = 0
    reproducible: bool = True  # train in a child process pinned to one thread and one kernel set (below)

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ZooResult:
    root: Path
    checkpoints: tuple[Path, ...]  # in training order
    reused: bool  # nothing was trained
    source: str = "trained"  # shipped (in the package) | cache (trained earlier) | trained (just now)


def training_examples(config: ZooConfig) -> list[Example]:
    return suite_examples(config.suites, config.examples_per_suite, config.seed)


def suite_examples(suites: tuple[str, ...], per_suite: int, seed: int) -> list[Example]:
    """``per_suite`` seeded examples of each built-in suite, suite after suite."""
    return [e for s in suites for e in SUITES.get(s).build(per_suite, seed=seed)]


def collate(batch: list[tuple[list[int], int]], pad_id: int) -> tuple[Any, Any, Any]:
    """(input_ids, labels, attention_mask) long tensors of a batch of (token ids, answer start): right
    padding with ``pad_id``; labels -100 except on the answer tokens (the loss covers the answer only)."""
    import torch

    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (ids, start) in enumerate(batch):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, start : len(ids)] = torch.tensor(ids[start:])
        mask[row, : len(ids)] = 1
    return input_ids, labels, mask


def render_training_text(example: Example, template: int) -> tuple[str, str]:
    """(prompt, answer continuation) in a trained format: the gold option, or the first reference answer."""
    spec = replace(RenderSpec.canonical(example), template=template)
    if example.answer_index is not None:
        return render(spec), " " + example.options[example.answer_index]
    if example.answers:
        return render(spec), " " + example.answers[0]
    raise InputError(f"{example.example_id}: no gold option or reference answer to train on")


def _encode(tokenizer, pairs: list[tuple[str, str]]) -> list[tuple[list[int], int]]:
    """Token ids of prompt + answer + EOS, and where the answer starts."""
    from sago_fast.answers.scoring import encode_pair

    out = []
    for prompt, answer in pairs:
        ctx, cont = encode_pair(tokenizer, prompt, answer)
        out.append((ctx + cont + [tokenizer.eos_token_id], len(ctx)))
    return out


# Training is chaotic: float differences of one ulp (another reduction order: more threads, AVX-512
# instead of AVX2 kernels) grow over 1,200 steps into other checkpoints. The reproducible training runs in
# a child process on one thread with deterministic torch algorithms and one kernel set: the same bytes
# whatever the caller's threads and kernels, on one machine. MKL and ATen still take other code paths on
# other CPU vendors, so the demo does not train: the package ships the default zoo (zoo/sources.py).
PINNED_THREADS = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "RAYON_RS_NUM_CPUS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def cpu_flags() -> frozenset[str]:
    """The instruction-set flags the CPU reports (``/proc/cpuinfo``; empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def reproducible_env(flags: frozenset[str] | None = None) -> dict[str, str]:
    """The child's environment: one thread, and the AVX2 kernels of MKL and ATen where the CPU has AVX2
    (asking ATen for a kernel set the CPU lacks kills the process with SIGILL), else the portable ones."""
    avx2 = "avx2" in (cpu_flags() if flags is None else flags)
    return {
        **PINNED_THREADS,
        "MKL_CBWR": "AVX2" if avx2 else "COMPATIBLE",
        "ATEN_CPU_CAPABILITY": "avx2" if avx2 else "default",
    }


def _train(config: ZooConfig, workdir: Path) -> list[Path]:
    """Train in this process, or (``config.reproducible``) in a pinned child process."""
    if not config.reproducible:
        return _train_here(config, workdir)
    import subprocess
    import sys

    child = "from sago_fast.zoo.train import _main; _main()"
    command = [sys.executable, "-c", child, json.dumps(asdict(config)), str(workdir)]
    done = subprocess.run(command, env={**os.environ, **reproducible_env()}, check=False)
    if done.returncode != 0:
        raise InputError(f"zoo training failed (exit code {done.returncode}; its messages are above)")
    return [workdir / f"step-{step:05d}" for step in sorted(config.save_steps)]


def _train_here(config: ZooConfig, workdir: Path) -> list[Path]:
    import torch

    if config.reproducible:
        torch.set_num_threads(1)
        torch.use_deterministic_algorithms(True)
    from transformers import AutoModelForCausalLM

    examples = training_examples(config)
    pairs = [render_training_text(e, t) for e in examples for t in config.train_templates]
    tokenizer = train_tokenizer([p + a for p, a in pairs], vocab_size=config.vocab_size)
    size = TinySize(
        hidden=config.hidden,
        layers=config.layers,
        heads=config.heads,
        kv_heads=config.heads,
        intermediate=config.hidden * 3,
        max_positions=256,
    )
    init = build_tiny_checkpoint("llama", workdir / "init", size, seed=config.seed, tokenizer=tokenizer)
    model = AutoModelForCausalLM.from_pretrained(init, dtype=torch.float32)
    model.train()
    encoded = _encode(tokenizer, pairs)
    rng = np.random.default_rng(config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.01)
    total = max(config.save_steps)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=config.learning_rate, total_steps=total, pct_start=0.1
    )
    saved: list[Path] = []
    from tqdm import tqdm

    # batches come from the seeded numpy stream; torch randomness is only used by the seeded init
    for step in tqdm(range(1, total + 1), desc="training zoo", unit="step", leave=False, disable=None):
        batch = [encoded[i] for i in rng.integers(0, len(encoded), size=config.batch_size)]
        input_ids, labels, mask = collate(batch, tokenizer.pad_token_id)
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if step in config.save_steps:
            path = workdir / f"step-{step:05d}"
            model.save_pretrained(path, safe_serialization=True)
            tokenizer.save_pretrained(path)
            saved.append(path)
            log.info("zoo: step %d loss %.3f -> %s", step, float(loss.detach()), path)
    shutil.rmtree(workdir / "init")
    return saved


def train_zoo(folder: str | os.PathLike[str], config: ZooConfig) -> ZooResult:
    """Train the zoo of ``config`` into ``folder`` (written under a temporary name, then renamed), with a
    ``zoo.json`` naming its configuration key and checkpoints."""
    if not config.save_steps or min(config.save_steps) < 1:
        raise InputError("save_steps must hold positive step numbers")
    root = Path(folder)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        saved = _train(config, tmp)
        (tmp / ZOO_FILE).write_text(
            json.dumps(
                {"key": config.key(), "config": asdict(config), "checkpoints": [p.name for p in saved]},
                indent=2,
            ),
            encoding="utf-8",
        )
        if root.exists():
            shutil.rmtree(root)
        os.replace(tmp, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ZooResult(root, tuple(root / p.name for p in saved), reused=False, source="trained")


def read_zoo(folder: str | os.PathLike[str], config: ZooConfig) -> tuple[Path, ...] | None:
    """The checkpoints of the zoo in ``folder`` when its ``zoo.json`` is ``config``'s and all are there."""
    root = Path(folder)
    manifest = root / ZOO_FILE
    if not manifest.is_file():
        return None
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    paths = tuple(root / name for name in data.get("checkpoints", []))
    if data.get("key") != config.key() or not paths:
        return None
    if not all((p / "config.json").is_file() and (p / "model.safetensors").is_file() for p in paths):
        return None
    return paths


def _main() -> None:
    """The reproducible training's child process (argv: CONFIG_JSON WORKDIR)."""
    import sys

    fields: dict[str, Any] = json.loads(sys.argv[1])
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    config = ZooConfig(**values)
    logging.basicConfig(level=logging.WARNING)
    _train_here(config, Path(sys.argv[2]))
