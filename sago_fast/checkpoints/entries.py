"""The checkpoints a ``--model`` entry names: a checkpoint as is, a training-run folder as its members, a
glob, a list file or a suite. Light on purpose (paths and YAML only): ``sago lm-eval`` expands its
``pretrained=`` here before anything heavy is imported."""

from __future__ import annotations

import glob
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sago_fast.checkpoints.gguf import is_gguf
from sago_fast.checkpoints.resolve import natural_key
from sago_fast.checkpoints.runs import run_members
from sago_fast.errors import InputError

log = logging.getLogger(__name__)

__all__ = ["ModelEntry", "expand_models", "model_entries"]


@dataclass(frozen=True)
class ModelEntry:
    """One checkpoint the run names; ``in_run``: found inside a training-run folder (a broken one is
    skipped with one line instead of stopping the run)."""

    text: str
    in_run: bool = False


def expand_models(models: Sequence[str]) -> list[str]:
    """Checkpoint paths of the given entries (see :func:`model_entries`)."""
    return [entry.text for entry in model_entries(models)]


def model_entries(models: Sequence[str]) -> list[ModelEntry]:
    """Checkpoints from the given entries: a checkpoint directory, LoRA adapter folder, ``.gguf`` file or
    hub id as is; a training-run folder (``checkpoint-N/``, ``step-N/``, ``global_stepN/``, ``iter_N/``
    members) as its members in step order; a glob (``ckpts/step-*``) expanded in natural order;
    ``@list.txt`` or a ``.txt`` file: one entry per line (# comments); a ``.yaml``/``.yml`` suite: a list,
    or a mapping with ``models``. Entries of files are expanded again, relative to the file."""
    out: list[ModelEntry] = []
    for entry in models:
        text = str(entry)
        path = Path(text[1:] if text.startswith("@") else text).expanduser()
        if text.startswith("@") or (path.suffix in (".txt", ".yaml", ".yml") and path.is_file()):
            out += model_entries(
                [str(path.parent / e) if not Path(e).is_absolute() else e for e in _list_file(path)]
            )
        elif any(ch in text for ch in "*?["):
            matches = sorted(glob.glob(str(path)), key=natural_key)
            matches = [m for m in matches if Path(m).is_dir() or is_gguf(Path(m))]
            if not matches:
                raise InputError(f"--model {text}: the pattern matches no checkpoint directory or .gguf file")
            for match in matches:  # a training-run folder among the matches: its members
                out += _checkpoint_or_run(match)
        else:
            out += _checkpoint_or_run(text)
    seen: set[str] = set()
    return [e for e in out if not (e.text in seen or seen.add(e.text))]  # type: ignore[func-returns-value]


def _checkpoint_or_run(text: str) -> list[ModelEntry]:
    """``text`` itself, or its members in step order when it names a training-run folder."""
    members = run_members(Path(text).expanduser())
    if members is None:
        return [ModelEntry(text)]
    log.info("%s: a training run of %d checkpoints", text, len(members))
    return [ModelEntry(str(m), in_run=True) for m in members]


def _list_file(path: Path) -> list[str]:
    if not path.is_file():
        raise InputError(f"{path}: no such checkpoint list")
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise InputError(f"{path}: invalid YAML ({str(exc).splitlines()[0]})") from None
        if isinstance(data, dict):
            data = data.get("models")
        if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
            raise InputError(f"{path}: expected a list of checkpoints (or a mapping with 'models')")
        return data
    lines = [line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines()]
    entries = [line for line in lines if line]
    if not entries:
        raise InputError(f"{path}: the checkpoint list is empty")
    return entries
