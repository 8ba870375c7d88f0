"""Work units and the plan of a run.

A unit is (checkpoint content, dataset, shard). Its id is a hash of the checkpoint's *content* hash, the
dataset id (itself a content hash) and every setting that changes results, so the same command finds its
finished units again (and skips them), while a changed checkpoint or setting makes new units. The run id
is a hash of the same settings and the set of units: re-running the same command continues the same run.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sago_fast.checkpoints.gguf import is_gguf
from sago_fast.checkpoints.resolve import Checkpoint, natural_key, resolve_checkpoint
from sago_fast.datasets.resolve import Dataset, load_dataset
from sago_fast.errors import InputError
from sago_fast.run.config import RunConfig
from sago_fast.types import Variant
from sago_fast.variants import VariantConfig, generate_variants

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Unit:
    unit_id: str
    index: int  # position in the plan (shards take every N-th unit)
    checkpoint: Checkpoint
    dataset_id: str
    shard: int = 0

    @property
    def model_id(self) -> str:
        return self.checkpoint.content_hash


@dataclass(frozen=True)
class Plan:
    run_id: str
    datasets: dict[str, Dataset]
    variants: dict[str, list[Variant]]
    units: tuple[Unit, ...]

    def by_checkpoint(self, units: Sequence[Unit]) -> list[tuple[Checkpoint, list[Unit]]]:
        """Units grouped by checkpoint content, in plan order (one model load per group)."""
        groups: dict[str, tuple[Checkpoint, list[Unit]]] = {}
        for unit in units:
            groups.setdefault(unit.model_id, (unit.checkpoint, []))[1].append(unit)
        return list(groups.values())


def expand_models(models: Sequence[str]) -> list[str]:
    """Checkpoint paths from the given entries: a directory, ``.gguf`` file or hub id as is; a glob (``ckpts/step-*``)
    expanded in natural order; ``@list.txt`` or a ``.txt`` file: one entry per line (# comments); a
    ``.yaml``/``.yml`` suite: a list, or a mapping with ``models``. Entries of files are expanded again,
    relative to the file."""
    out: list[str] = []
    for entry in models:
        text = str(entry)
        path = Path(text[1:] if text.startswith("@") else text).expanduser()
        if text.startswith("@") or (path.suffix in (".txt", ".yaml", ".yml") and path.is_file()):
            out += expand_models(
                [str(path.parent / e) if not Path(e).is_absolute() else e for e in _list_file(path)]
            )
        elif any(ch in text for ch in "*?["):
            matches = sorted(glob.glob(str(path)), key=natural_key)
            matches = [m for m in matches if Path(m).is_dir() or is_gguf(Path(m))]
            if not matches:
                raise InputError(f"--model {text}: the pattern matches no checkpoint directory or .gguf file")
            out += matches
        else:
            out.append(text)
    seen: set[str] = set()
    return [m for m in out if not (m in seen or seen.add(m))]  # type: ignore[func-returns-value]


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


def _digest(payload: object) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def result_settings(config: RunConfig) -> dict[str, object]:
    """Every setting that changes a unit's results (not where they are written)."""
    from sago_fast import __version__

    return {
        "families": config.families,
        "k": config.variants_per_family,
        "limit": config.limit,
        "seed": config.seed,
        "device": config.device,
        "max_new_tokens": config.max_new_tokens,
        "stop": config.stop,
        "answer_mode": config.answer_mode,
        "chat_template": config.chat_template,
        "system_prompt": config.system_prompt,
        "num_fewshot": config.num_fewshot,
        "fewshot_from": config.fewshot_from,
        "fields": config.fields,
        "sample_memory_mb": config.sample_memory_mb,
        "sago_fast": __version__,
    }


def plan_run(config: RunConfig) -> Plan:
    """Datasets, variants and units of ``config``; validates everything before any model is exported."""
    fields = config.field_map
    datasets = [
        load_dataset(name, fields=fields, limit=config.limit, seed=config.seed) for name in config.datasets
    ]
    pool = load_dataset(config.fewshot_from, fields=fields).examples if config.fewshot_from else ()
    variant_config = VariantConfig(
        families=config.families,
        k=config.variants_per_family,
        seed=config.seed,
        num_fewshot=config.num_fewshot,
        fewshot_pool=tuple(pool),
        shot_answer=config.shot_answer,
        chat=config.chat_template == "auto",
    )
    variant_config.family_names()  # unknown families fail here
    variants = {
        d.dataset_id: generate_variants(d.examples, variant_config, config.fewshot_from or d.name)
        for d in datasets
    }
    checkpoints: dict[str, Checkpoint] = {}
    for checkpoint in _resolve_all(expand_models(config.models)):
        checkpoints.setdefault(checkpoint.content_hash, checkpoint)  # same content twice: evaluated once
    settings = result_settings(config)
    units: list[Unit] = []
    for checkpoint in checkpoints.values():
        for data in datasets:
            unit_id = _digest([settings, checkpoint.content_hash, data.dataset_id, 0])
            units.append(Unit(unit_id, len(units), checkpoint, data.dataset_id))
    run_id = "run-" + _digest([settings, sorted(u.unit_id for u in units)])
    return Plan(run_id, {d.dataset_id: d for d in datasets}, variants, tuple(units))


def _resolve_all(models: Sequence[str]) -> list[Checkpoint]:
    """Each model resolved and content-hashed, in order. Checkpoint folders are hashed on a few threads
    at once (hashlib and file reads release the GIL: ~2x on two cores for checkpoints not hashed before);
    GGUF files, which are converted through torch, one at a time. The first failure in order is raised."""
    if len(models) < 2 or any(is_gguf(Path(m)) for m in models):
        return [resolve_checkpoint(m) for m in models]
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        return list(pool.map(resolve_checkpoint, models))


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"i/N"`` (0 <= i < N) -> (i, N)."""
    if text is None:
        return None
    try:
        index, total = (int(x) for x in text.split("/"))
    except ValueError:
        raise InputError(f"--shard {text!r}: expected i/N, e.g. 0/4") from None
    if total < 1 or not 0 <= index < total:
        raise InputError(f"--shard {text!r}: need 0 <= i < N")
    return index, total
