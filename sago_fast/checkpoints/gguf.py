"""GGUF files as checkpoints: dequantised once through transformers into a cached HF checkpoint folder.

transformers reads GGUF weights (``from_pretrained(dir, gguf_file=NAME)``, with the ``gguf`` and
``accelerate`` packages) and dequantises them to float32, but its tokenizer conversion does not follow
the file's own special-token settings for every model: for SmolLM2 it adds ``<|im_start|>`` before every
text and uses it as EOS, while the GGUF metadata says ``add_bos_token = false`` and EOS = ``<|im_end|>``.
Here the tokenizer's special tokens and BOS/EOS insertion are set from the metadata, then checked
against it (vocabulary, merges, special ids, what ``tokenizer(text)`` adds) before the folder is kept.

The folder is keyed by the SHA-256 of the GGUF file, so a file is converted once whatever its path.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from sago_fast.errors import CheckpointError
from sago_fast.hashing import file_sha256, remembered
from sago_fast.paths import cache_root

log = logging.getLogger(__name__)

SOURCE_FILE = "gguf_source.json"  # written into the converted folder: what it was made from
_FORMAT = 1  # bump when the conversion changes: old folders are then converted again


@dataclass(frozen=True)
class GGUFTokenizerSettings:
    """Special-token settings of a GGUF file (``tokenizer.ggml.*`` metadata); ids may be absent."""

    model: str  # tokenizer.ggml.model: "gpt2" (byte-level BPE), "llama" (sentencepiece), ...
    vocab_size: int
    n_merges: int
    bos_token_id: int | None
    eos_token_id: int | None
    pad_token_id: int | None
    unk_token_id: int | None
    add_bos_token: bool  # GGUF default when the key is absent: true for "llama", false otherwise
    add_eos_token: bool


@dataclass(frozen=True)
class GGUFInfo:
    """What the models table records about a GGUF source."""

    file_name: str
    sha256: str
    architecture: str
    quantization: str  # general.file_type, e.g. "Q4_1"; "mixed" when unknown
    tensor_types: dict[str, int]  # tensor count per GGML type, e.g. {"Q4_1": 210, "F32": 61}
    tokenizer: GGUFTokenizerSettings


def is_gguf(path: str | os.PathLike[str]) -> bool:
    return Path(path).suffix.lower() == ".gguf"


def _field(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return default
    value = field.contents()
    return value


def read_gguf_info(path: Path, sha256: str | None = None) -> GGUFInfo:
    """Metadata of a GGUF file (header only; tensors are not read)."""
    try:
        import gguf
    except ImportError:
        raise CheckpointError(
            f"{path}: reading GGUF files needs the 'gguf' package (pip install gguf)"
        ) from None
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as exc:  # gguf raises ValueError/struct errors on damaged files
        raise CheckpointError(f"{path}: not a readable GGUF file ({exc})") from None
    model = str(_field(reader, "tokenizer.ggml.model", "") or "")
    if not model:
        raise CheckpointError(f"{path}: the GGUF file has no tokenizer (tokenizer.ggml.model missing)")
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    merges = reader.fields.get("tokenizer.ggml.merges")

    def optional_id(key: str) -> int | None:
        value = _field(reader, key)
        return None if value is None else int(value)

    settings = GGUFTokenizerSettings(
        model=model,
        vocab_size=len(tokens.data) if tokens is not None else 0,
        n_merges=len(merges.data) if merges is not None else 0,
        bos_token_id=optional_id("tokenizer.ggml.bos_token_id"),
        eos_token_id=optional_id("tokenizer.ggml.eos_token_id"),
        pad_token_id=optional_id("tokenizer.ggml.padding_token_id"),
        unk_token_id=optional_id("tokenizer.ggml.unknown_token_id"),
        add_bos_token=bool(_field(reader, "tokenizer.ggml.add_bos_token", model == "llama")),
        add_eos_token=bool(_field(reader, "tokenizer.ggml.add_eos_token", False)),
    )
    types: dict[str, int] = {}
    for tensor in reader.tensors:
        types[tensor.tensor_type.name] = types.get(tensor.tensor_type.name, 0) + 1
    file_type = _field(reader, "general.file_type")
    try:
        quantization = gguf.LlamaFileType(int(file_type)).name.removeprefix("MOSTLY_")
    except (TypeError, ValueError):
        quantization = "mixed"
    return GGUFInfo(
        file_name=path.name,
        sha256=sha256 or file_sha256(path),
        architecture=str(_field(reader, "general.architecture", "")),
        quantization=quantization,
        tensor_types=types,
        tokenizer=settings,
    )


def gguf_tokens(path: Path) -> list[str]:
    """The vocabulary stored in the file (``tokenizer.ggml.tokens``), in id order."""
    import gguf

    field = gguf.GGUFReader(str(path)).fields["tokenizer.ggml.tokens"]
    return [str(x) for x in field.contents()]


def default_gguf_dir() -> Path:
    """``$SAGO_CACHE_DIR/gguf`` or ``~/.cache/sago_fast/gguf``."""
    return cache_root() / "gguf"


def apply_tokenizer_settings(tokenizer: Any, tokens: list[str], settings: GGUFTokenizerSettings) -> None:
    """Set special tokens and BOS/EOS insertion of ``tokenizer`` (a fast tokenizer) from the metadata."""
    from tokenizers.processors import TemplateProcessing

    def token(token_id: int | None) -> str | None:
        return None if token_id is None or not 0 <= token_id < len(tokens) else tokens[token_id]

    special = {
        "bos_token": token(settings.bos_token_id),
        "eos_token": token(settings.eos_token_id),
        "pad_token": token(settings.pad_token_id),
        "unk_token": token(settings.unk_token_id),
    }
    for name, value in special.items():
        setattr(tokenizer, name, value)
    added: list[tuple[str, int]] = []  # (token, id) inserted by the post-processor
    if settings.add_bos_token and special["bos_token"] is not None:
        added.append((special["bos_token"], settings.bos_token_id))  # type: ignore[arg-type]
    if settings.add_eos_token and special["eos_token"] is not None:
        added.append((special["eos_token"], settings.eos_token_id))  # type: ignore[arg-type]
    bos = [f"{special['bos_token']}:0"] if settings.add_bos_token and special["bos_token"] else []
    eos = [f"{special['eos_token']}:0"] if settings.add_eos_token and special["eos_token"] else []
    if hasattr(tokenizer, "add_bos_token"):  # Llama-style fast tokenizers rebuild their post-processor
        tokenizer.add_bos_token = bool(bos)
        tokenizer.add_eos_token = bool(eos)
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single=[*bos, "$A:0", *eos],
        pair=[*bos, "$A:0", *eos, "$B:1"],
        special_tokens=sorted(set(added)),
    )


def check_tokenizer(tokenizer: Any, tokens: list[str], info: GGUFInfo) -> None:
    """Raise CheckpointError unless ``tokenizer`` agrees with the GGUF metadata."""
    settings = info.tokenizer
    where = f"{info.file_name}: converted tokenizer"
    if len(tokenizer) < len(tokens):
        raise CheckpointError(f"{where} has {len(tokenizer)} tokens, the GGUF file {len(tokens)}")
    converted = tokenizer.convert_ids_to_tokens(list(range(len(tokens))))
    mismatched = [i for i, (a, b) in enumerate(zip(converted, tokens, strict=True)) if a != b]
    if mismatched:
        i = mismatched[0]
        raise CheckpointError(f"{where}: token {i} is {converted[i]!r}, the GGUF file says {tokens[i]!r}")
    for name in ("bos", "eos", "pad", "unk"):
        expected = getattr(settings, f"{name}_token_id")
        actual = getattr(tokenizer, f"{name}_token_id")
        if expected is not None and actual != expected:
            raise CheckpointError(f"{where}: {name}_token_id {actual}, the GGUF file says {expected}")
    ids = tokenizer("Hello world")["input_ids"]
    plain = tokenizer("Hello world", add_special_tokens=False)["input_ids"]
    starts = bool(ids) and ids[0] == settings.bos_token_id and ids[1:] == plain[: len(ids) - 1]
    ends = bool(ids) and ids[-1] == settings.eos_token_id and len(ids) > len(plain)
    if starts != settings.add_bos_token or ends != settings.add_eos_token:
        raise CheckpointError(
            f"{where} adds BOS={starts} EOS={ends}; the GGUF file says add_bos_token={settings.add_bos_token} "
            f"add_eos_token={settings.add_eos_token}"
        )
    if settings.n_merges:
        merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"].get("merges", [])
        if len(merges) != settings.n_merges:
            raise CheckpointError(f"{where} has {len(merges)} merges, the GGUF file {settings.n_merges}")


def convert_gguf(path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The HF checkpoint folder made from GGUF file ``path`` (converted on first use, then cached)."""
    source = Path(path).expanduser().resolve()
    if not source.is_file():
        raise CheckpointError(f"{path}: no such GGUF file")
    sha = remembered("gguf", [source], lambda: file_sha256(source), cache_root())
    root = Path(cache_dir) if cache_dir is not None else default_gguf_dir()
    target = root / f"{sha[:24]}-v{_FORMAT}"
    if (target / SOURCE_FILE).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f".{target.name}.lock")):
        if (target / SOURCE_FILE).is_file():
            return target
        info = read_gguf_info(source, sha)
        log.info(
            "converting %s (%s, %s) to an HF checkpoint in %s",
            source.name,
            info.architecture,
            info.quantization,
            target,
        )
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=root))
        try:
            _convert(source, info, tmp)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


@contextmanager
def _no_conversion_bar() -> Iterator[None]:
    """transformers draws its own tqdm bar over the GGUF tensors (not switched off by its logging
    settings); sago's one log line says what happens instead."""
    from functools import partial
    from unittest import mock

    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    bar = getattr(gguf_utils, "tqdm", None)
    if bar is None:
        yield
        return
    with mock.patch.object(gguf_utils, "tqdm", partial(bar, disable=True)):
        yield


def _convert(source: Path, info: GGUFInfo, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    from sago_fast.console import progress_line

    progress_line(None, f"converting {source.name} once (dequantised to float32; cached in {out.parent})")
    try:
        with _no_conversion_bar():
            tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
            model = AutoModelForCausalLM.from_pretrained(
                source.parent, gguf_file=source.name, dtype=torch.float32
            )
    except ImportError as exc:
        raise CheckpointError(f"{source}: loading GGUF files needs {exc}") from None
    except Exception as exc:  # unsupported architecture or quantisation type
        raise CheckpointError(f"{source}: transformers cannot load this GGUF file ({exc})") from None
    tokens = gguf_tokens(source)
    apply_tokenizer_settings(tokenizer, tokens, info.tokenizer)
    for name in ("bos", "eos", "pad"):
        value = getattr(info.tokenizer, f"{name}_token_id")
        if value is not None:
            setattr(model.config, f"{name}_token_id", value)
            if model.generation_config is not None:
                setattr(model.generation_config, f"{name}_token_id", value)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    reloaded = AutoTokenizer.from_pretrained(out)
    check_tokenizer(reloaded, tokens, info)
    (out / SOURCE_FILE).write_text(
        json.dumps({**asdict(info), "format": _FORMAT}, indent=2), encoding="utf-8"
    )


def gguf_source(folder: Path) -> dict[str, Any] | None:
    """The GGUF record of a converted folder, or None for an ordinary checkpoint."""
    file = folder / SOURCE_FILE
    return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else None
