"""Training-run folders: a folder of checkpoints named by step, expanded into its checkpoints in step order.

Recognised member names (case-insensitive), the number being the optimiser step:

================  ==========================================
``checkpoint-N``  Hugging Face Trainer (with ``trainer_state.json``)
``step-N``        ``step_N``, ``stepN`` (many trainers; sago's own zoo)
``global_stepN``  DeepSpeed, ``global_step_N`` too
``iter_N``        Megatron-LM, ``iter-N``, ``iter_0001000`` too
================  ==========================================

A member's step is ``global_step`` of its ``trainer_state.json`` when it has one (else the number in its
name); its tokens seen are ``num_input_tokens_seen`` there (recorded when the Trainer counted them).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MEMBER_NAME = re.compile(r"^(?:checkpoint|step|global_step|iter)[-_]?(\d+)$", re.IGNORECASE)
TRAINER_STATE = "trainer_state.json"
CHECKPOINT_MARKERS = ("config.json", "adapter_config.json")  # a folder with one of these is a checkpoint


@dataclass(frozen=True)
class TrainingPosition:
    """Where a checkpoint sits in its training run (all None for a checkpoint outside one)."""

    training_run: str | None = None  # the run folder (resolved path)
    step: int | None = None
    tokens_seen: int | None = None


def step_from_name(name: str) -> int | None:
    """The step in a member's folder name (``checkpoint-500`` -> 500), or None."""
    match = MEMBER_NAME.match(name)
    return int(match.group(1)) if match else None


def read_trainer_state(folder: Path) -> dict | None:
    """The folder's ``trainer_state.json`` as a mapping; None when absent or unreadable (logged)."""
    file = folder / TRAINER_STATE
    if not file.is_file():
        return None
    try:
        state = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("%s: unreadable (%s); the step comes from the folder name", file, exc)
        return None
    return state if isinstance(state, dict) else None


def training_position(folder: Path) -> TrainingPosition:
    """Step and tokens seen of a checkpoint folder, from its trainer state or its name; the run is the
    parent folder when the name is a member name."""
    name_step = step_from_name(folder.name)
    state = read_trainer_state(folder) or {}
    step = state.get("global_step")
    step = int(step) if isinstance(step, int) and not isinstance(step, bool) else name_step
    tokens = state.get("num_input_tokens_seen")
    tokens = int(tokens) if isinstance(tokens, int) and tokens > 0 else None
    if step is None:
        return TrainingPosition()
    return TrainingPosition(str(folder.parent.resolve()), step, tokens)


def is_checkpoint_folder(folder: Path) -> bool:
    return any((folder / marker).is_file() for marker in CHECKPOINT_MARKERS)


def run_members(folder: Path) -> list[Path] | None:
    """The member folders of a training-run folder in step order, or None when ``folder`` is not one (it
    is a checkpoint itself, or has no member-named subfolders). Members are every subfolder with a member
    name, checkpoint files or not: a broken member is reported when it is resolved."""
    if not folder.is_dir() or is_checkpoint_folder(folder):
        return None
    members = [p for p in folder.iterdir() if p.is_dir() and step_from_name(p.name) is not None]
    if not members:
        return None
    return sorted(members, key=lambda p: (training_position(p).step or 0, p.name))
