"""Find a checkpoint directory, validate its format, and identify it by the hash of its content.

A model is identified by the SHA-256 of its weights, config and tokenizer files, never by its path.
Only safetensors weights are accepted by default: pickle (``.bin``) checkpoints can execute code on load.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from sago_fast.checkpoints.runs import TrainingPosition, training_position
from sago_fast.errors import CheckpointError
from sago_fast.hashing import remembered, update_with_file
from sago_fast.paths import cache_root

log = logging.getLogger(__name__)
R = TypeVar("R")

CONFIG_FILE = "config.json"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
)


@dataclass(frozen=True)
class Checkpoint:
    """A validated HF-format checkpoint directory."""

    path: Path
    model_type: str
    weight_files: tuple[str, ...]
    content_hash: str  # sha256 hex over config, tokenizer and weight files (names and bytes)
    source_format: str = "hf"  # "hf" (safetensors folder), "gguf" (converted from a GGUF file), "lora"
    quantization: str | None = None  # GGUF file type of the source (e.g. "Q4_1"); None for HF folders
    origin: Path | None = None  # what the user named (the .gguf file); None when it is ``path``
    position: TrainingPosition = field(default_factory=TrainingPosition)  # step, tokens seen (training run)
    base: Checkpoint | None = None  # a LoRA adapter's base model (source_format "lora")

    @property
    def is_adapter(self) -> bool:
        return self.base is not None

    @property
    def display_path(self) -> Path:
        """The path to show and record: the GGUF file for converted checkpoints, else the folder."""
        return self.origin or self.path


def _weight_files(path: Path, allow_pickle: bool) -> tuple[str, ...]:
    from sago_fast.checkpoints.tensors import safetensors_header

    safetensors = sorted(p.name for p in path.glob("*.safetensors"))
    if safetensors:
        for name in safetensors:  # a truncated or damaged file is named here, before any export
            safetensors_header(path / name)
        return tuple(safetensors)
    pickles = sorted(p.name for p in path.glob("*.bin") if "pytorch_model" in p.name or "model" in p.name)
    if pickles and not allow_pickle:
        raise CheckpointError(
            f"{path}: only pickle weights ({pickles[0]}) found; sago loads safetensors only "
            "(convert the checkpoint, or pass allow_pickle=True / --allow-pickle if you trust it)"
        )
    if pickles:
        return tuple(pickles)
    raise CheckpointError(f"{path}: no model weights (*.safetensors) in this directory")


def content_hash(path: Path, files: list[str]) -> str:
    """SHA-256 over (file name, size, bytes) of ``files`` in sorted order."""
    digest = hashlib.sha256()
    for name in sorted(files):
        file = path / name
        digest.update(name.encode() + b"\0" + str(file.stat().st_size).encode() + b"\0")
        update_with_file(digest, file)
    return digest.hexdigest()


def _download_from_hub(repo_id: str) -> Path:
    """Fetch a hub checkpoint (safetensors + config + tokenizer only). Needs network access."""
    from huggingface_hub import snapshot_download

    try:
        local = snapshot_download(
            repo_id, allow_patterns=["*.json", "*.safetensors", "tokenizer.model", "*.txt"]
        )
    except Exception as exc:  # hub errors come in many types; report one line
        raise CheckpointError(
            f"{repo_id}: not a local directory and not downloadable from the hub ({exc})"
        ) from None
    return Path(local)


def natural_key(name: str) -> tuple:
    """Sort 'step-150' before 'step-1200' (checkpoints of one training run in training order)."""
    import re

    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def resolve_checkpoint(
    checkpoint: str | os.PathLike[str],
    *,
    allow_pickle: bool = False,
    gguf_cache_dir: str | os.PathLike[str] | None = None,
    base: str | os.PathLike[str] | Checkpoint | None = None,
) -> Checkpoint:
    """Validate ``checkpoint`` (a directory, a ``.gguf`` file, a PEFT LoRA folder, or a hub id like
    ``org/name``) and hash its content. A GGUF file is dequantised once into an HF folder under
    ``gguf_cache_dir`` (default ``~/.cache/sago_fast/gguf``) whose tokenizer follows the file's metadata;
    see :mod:`.gguf`. A LoRA folder's base is ``base`` when given, else its ``base_model_name_or_path``
    (see :mod:`.adapters`). A member of a training-run folder records its step (see :mod:`.runs`)."""
    from sago_fast.checkpoints.adapters import is_adapter_folder

    path = Path(checkpoint).expanduser()
    if is_adapter_folder(path):
        return _resolve_adapter(path, base, allow_pickle, gguf_cache_dir)
    resolved = _resolve_model(checkpoint, allow_pickle, gguf_cache_dir)
    if path.is_dir():
        return dataclasses.replace(resolved, position=training_position(path))
    return resolved


def _resolve_adapter(
    path: Path,
    base: str | os.PathLike[str] | Checkpoint | None,
    allow_pickle: bool,
    gguf_cache_dir: str | os.PathLike[str] | None,
) -> Checkpoint:
    """A LoRA adapter folder over its resolved base; its content hash covers the adapter and the base."""
    from sago_fast.checkpoints.adapters import (
        ADAPTER_CONFIG,
        adapter_hash,
        adapter_modules,
        adapter_weights,
        base_reference,
        check_base_shapes,
        read_adapter_config,
    )
    from sago_fast.checkpoints.tensors import safetensors_header

    config = read_adapter_config(path)
    weights = adapter_weights(path)
    adapter_header = safetensors_header(weights)[1]
    adapter_modules(path, adapter_header)  # refuses what cannot be evaluated, up front
    if not isinstance(base, Checkpoint):
        reference = base_reference(path, config, None if base is None else str(base))
        try:
            base = _resolve_model(reference, allow_pickle, gguf_cache_dir)
        except CheckpointError as exc:
            named_by = "--base" if base is not None else f"base_model_name_or_path in {ADAPTER_CONFIG}"
            raise CheckpointError(
                f"adapter {path}: its base ({named_by}) cannot be used: {exc} (set the base with --base)"
            ) from None
    if base.is_adapter:
        raise CheckpointError(f"{path}: its base {base.display_path} is an adapter itself")
    base_files = [base.path / f for f in base.weight_files if f.endswith(".safetensors")]
    if base_files:  # a pickle-only base is checked when its weights are exported
        base_header = {
            name: info for file in base_files for name, info in safetensors_header(file)[1].items()
        }
        check_base_shapes(path, config, adapter_header, base_header)
    files = [path / ADAPTER_CONFIG, weights]
    digest = remembered(
        "adapter-" + base.content_hash, files, lambda: adapter_hash(path, base.content_hash), cache_root()
    )
    return Checkpoint(
        path=path.resolve(),
        model_type=base.model_type,
        weight_files=(weights.name,),
        content_hash=digest,
        source_format="lora",
        quantization=base.quantization,
        position=training_position(path),
        base=base,
    )


def resolve_each(references: Sequence[str], resolve: Callable[[int], R]) -> list[R]:
    """``resolve(i)`` for the i-th of ``references`` (what ``sago run -m`` takes), in order. Checkpoint folders
    are hashed on a few threads at once (hashlib and file reads release the GIL: ~2x on two cores for
    checkpoints not hashed before); GGUF files (converted through torch) and adapters (their bases resolved
    once) one at a time. The first failure, in order, is raised."""
    from sago_fast.checkpoints.adapters import is_adapter_folder
    from sago_fast.checkpoints.gguf import is_gguf

    paths = [Path(r).expanduser() for r in references]
    if len(paths) < 2 or any(is_gguf(p) or is_adapter_folder(p) for p in paths):
        return [resolve(i) for i in range(len(paths))]
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="sago-hash") as pool:
        return list(pool.map(resolve, range(len(paths))))


def _resolve_model(
    checkpoint: str | os.PathLike[str],
    allow_pickle: bool,
    gguf_cache_dir: str | os.PathLike[str] | None,
) -> Checkpoint:
    from sago_fast.checkpoints.gguf import convert_gguf, gguf_source, is_gguf

    path = Path(checkpoint).expanduser()
    if is_gguf(path):
        if not path.is_file():
            raise CheckpointError(f"{checkpoint}: no such GGUF file")
        folder = convert_gguf(path, gguf_cache_dir)
        resolved = _resolve_model(folder, False, None)
        source = gguf_source(folder) or {}
        return dataclasses.replace(
            resolved, source_format="gguf", quantization=source.get("quantization"), origin=path.resolve()
        )
    if not path.exists():
        text = str(checkpoint)
        looks_like_hub_id = text.count("/") == 1 and not text.startswith((".", "/", "~"))
        if looks_like_hub_id and not os.environ.get("HF_HUB_OFFLINE"):
            path = _download_from_hub(text)
        else:
            raise CheckpointError(f"{checkpoint}: no such checkpoint directory")
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a directory (a checkpoint is a directory with config.json)")
    config_file = path / CONFIG_FILE
    if not config_file.is_file():
        raise CheckpointError(f"{path}: no {CONFIG_FILE}; not a Hugging Face checkpoint directory")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{config_file}: invalid JSON ({exc})") from None
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise CheckpointError(f"{config_file}: field 'model_type' is missing")
    weights = _weight_files(path, allow_pickle)
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
        raise CheckpointError(f"{path}: no tokenizer files (tokenizer.json / tokenizer_config.json)")
    hashed = [CONFIG_FILE, *weights, *(n for n in TOKENIZER_FILES if (path / n).is_file())]
    digest = remembered(
        "checkpoint",
        [path / name for name in sorted(hashed)],
        lambda: content_hash(path, hashed),
        cache_root(),
    )
    log.debug("checkpoint %s: %s, hash %s", path, model_type, digest[:16])
    return Checkpoint(path=path.resolve(), model_type=model_type, weight_files=weights, content_hash=digest)
