"""LoRA adapters (PEFT folders) as checkpoints: read and validated here, evaluated over their base's graph.

A PEFT LoRA folder holds ``adapter_config.json`` and ``adapter_model.safetensors`` with, for every adapted
linear layer ``M``, the factors ``base_model.model.M.lora_A.weight`` (r, in) and ``...lora_B.weight``
(out, r). The adapted layer computes ``W x + scale · B A x`` with ``scale = alpha / r`` (``alpha / √r``
under rsLoRA), which is the linear layer with weight ``W + scale · B A``
(:mod:`sago_fast.exporters.lora` builds those weights in memory over the base's exported graph).

Supported: LoRA (``peft_type: LORA``) on linear layers whose weight is a named weight of the base's graph
(attention and MLP projections: q/k/v/o, gate/up/down, fused qkv, ...), with ``rank_pattern`` /
``alpha_pattern``, rsLoRA and ``fan_in_fan_out`` (GPT-2's Conv1D). Anything else (DoRA, adapters on
embeddings, bias training, ``modules_to_save``, other PEFT types) is refused with one line.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sago_fast.errors import CheckpointError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
SAVED_PREFIX = "base_model.model."  # PEFT's prefix of every saved key
FACTOR_SUFFIXES = (".lora_A.weight", ".lora_B.weight")
SUPPORTED_TYPES = ("LORA",)


def is_adapter_folder(path: Path) -> bool:
    return path.is_dir() and (path / ADAPTER_CONFIG).is_file()


@dataclass(frozen=True)
class LoraConfig:
    """What of ``adapter_config.json`` the merge reads."""

    rank: int
    alpha: float
    use_rslora: bool
    fan_in_fan_out: bool
    rank_pattern: dict[str, int]
    alpha_pattern: dict[str, float]
    base_model: str | None  # base_model_name_or_path

    def scale(self, module: str, rank: int) -> float:
        """``alpha / r`` (``alpha / √r`` under rsLoRA) of one adapted module (patterns first, as PEFT)."""
        alpha = _pattern_value(self.alpha_pattern, module, self.alpha)
        return alpha / math.sqrt(rank) if self.use_rslora else alpha / rank


def _pattern_value(patterns: dict[str, Any], module: str, default: Any) -> Any:
    """PEFT's rule: a pattern key applies to a module whose name ends with it (regex, at a dot boundary)."""
    for key, value in patterns.items():
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default


def read_adapter_config(folder: Path) -> LoraConfig:
    """The LoRA settings of ``folder``; CheckpointError (one line naming the file and field) for an
    unreadable file or an adapter sago cannot evaluate."""
    file = folder / ADAPTER_CONFIG
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{file}: unreadable adapter config ({exc})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{file}: expected a JSON object")
    peft_type = str(config.get("peft_type", "")).upper()
    if peft_type not in SUPPORTED_TYPES:
        raise CheckpointError(
            f"{file}: peft_type {config.get('peft_type')!r} is not supported (sago evaluates LoRA adapters)"
        )
    refused = {
        "use_dora": "DoRA adapters are not supported (their magnitude vectors change the weight norm)",
        "modules_to_save": "modules_to_save (fully trained copies of modules) is not supported",
        "layer_replication": "layer_replication is not supported",
        "trainable_token_indices": "trainable token embeddings are not supported",
        "target_parameters": "LoRA on raw parameters (target_parameters) is not supported",
        "lora_bias": "LoRA bias terms (lora_bias) are not supported",
        "alora_invocation_tokens": "activated LoRA (aLoRA) is not supported",
    }
    for field, why in refused.items():
        if config.get(field):
            raise CheckpointError(f"{file}: field {field!r}: {why}")
    if config.get("bias", "none") != "none":
        raise CheckpointError(f"{file}: field 'bias' is {config['bias']!r}: trained biases are not supported")
    try:
        rank = int(config["r"])
        alpha = float(config.get("lora_alpha") or rank)
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"{file}: field 'r' (the LoRA rank) is missing or not a number") from None
    return LoraConfig(
        rank=rank,
        alpha=alpha,
        use_rslora=bool(config.get("use_rslora", False)),
        fan_in_fan_out=bool(config.get("fan_in_fan_out", False)),
        rank_pattern=dict(config.get("rank_pattern") or {}),
        alpha_pattern={k: float(v) for k, v in (config.get("alpha_pattern") or {}).items()},
        base_model=config.get("base_model_name_or_path"),
    )


def adapter_modules(folder: Path, header: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Adapted module -> (key of A, key of B) from the weights file's tensor names; CheckpointError for a
    tensor that is not a LoRA factor of a linear layer (embedding adapters, DoRA, saved modules)."""
    file = folder / ADAPTER_WEIGHTS
    for marker, what in (
        ("lora_embedding", "an embedding adapter"),
        ("magnitude", "a DoRA magnitude vector"),
    ):
        found = next((key for key in header if marker in key), None)
        if found is not None:
            raise CheckpointError(f"{file}: tensor {found!r} is {what}; not supported")
    factors: dict[str, dict[str, str]] = {}
    for key in header:
        name = key.removeprefix(SAVED_PREFIX)
        for suffix, which in zip(FACTOR_SUFFIXES, "AB", strict=True):
            if name.endswith(suffix):
                factors.setdefault(name.removesuffix(suffix), {})[which] = key
                break
        else:
            raise CheckpointError(
                f"{file}: tensor {key!r} is not a LoRA factor of a linear layer (a saved module?); not supported"
            )
    for module, pair in factors.items():
        if set(pair) != {"A", "B"}:
            raise CheckpointError(f"{file}: module {module!r} has lora_A or lora_B only")
    if not factors:
        raise CheckpointError(f"{file}: no LoRA factors in this file")
    return {module: (pair["A"], pair["B"]) for module, pair in sorted(factors.items())}


def check_base_shapes(
    folder: Path, config: LoraConfig, adapter_header: dict[str, Any], base_header: dict[str, Any]
) -> None:
    """CheckpointError (one line naming the adapter, the module and ``--base``) when an adapted module's
    update ``B A`` (out, in) does not fit the base's weight, e.g. a base of another architecture or size.
    ``base_header``: the base's safetensors tensors (all files). Checked before anything is exported."""
    modules = adapter_modules(folder, adapter_header)
    for module, (key_a, key_b) in modules.items():
        found = [
            module + ".weight",
            module.split(".", 1)[-1] + ".weight",
        ]  # GPT-2 saves without "transformer."
        weight = next((base_header[k] for k in found if k in base_header), None)
        if weight is None:
            raise CheckpointError(
                f"{folder}: adapted module {module!r} has no weight in the base "
                "(a base of another architecture? name the right one with --base)"
            )
        rank_in, out_rank = adapter_header[key_a]["shape"], adapter_header[key_b]["shape"]
        update = (out_rank[0], rank_in[-1])
        expected = tuple(update[::-1]) if config.fan_in_fan_out else update
        if tuple(weight["shape"]) != expected:
            raise CheckpointError(
                f"{folder}: {module}: the adapter's update is {expected}, the base's weight "
                f"{tuple(weight['shape'])}: the adapter does not fit this base (set the right one with --base)"
            )


def adapter_weights(folder: Path) -> Path:
    file = folder / ADAPTER_WEIGHTS
    if not file.is_file():
        pickled = folder / "adapter_model.bin"
        hint = (
            " (only a pickle adapter_model.bin; save with safe_serialization=True)"
            if pickled.is_file()
            else ""
        )
        raise CheckpointError(f"{folder}: no {ADAPTER_WEIGHTS}{hint}")
    return file


def adapter_hash(folder: Path, base_hash: str) -> str:
    """Content hash of an adapter: its config and weights, and its base's content hash."""
    from sago_fast.hashing import update_with_file

    digest = hashlib.sha256(b"lora\0" + base_hash.encode() + b"\0")
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        digest.update(name.encode() + b"\0")
        update_with_file(digest, folder / name)
    return digest.hexdigest()


def base_reference(folder: Path, config: LoraConfig, base: str | None) -> str:
    """What the base is: ``base`` (``--base``) when given, else ``base_model_name_or_path``; a relative
    path is looked up from the working directory, then from the adapter folder."""
    reference = base or config.base_model
    if not reference:
        raise CheckpointError(
            f"{folder / ADAPTER_CONFIG}: field 'base_model_name_or_path' is empty; name the base with --base"
        )
    if base is None and not Path(reference).expanduser().exists() and (folder / reference).exists():
        return str(folder / reference)
    return reference
