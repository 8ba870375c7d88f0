"""Work units and the plan of a run.

A unit is (checkpoint content, dataset, shard). Its id is a hash of the checkpoint's *content* hash, the
dataset id (itself a content hash) and every setting that changes results, so the same command finds its
finished units again (and skips them), while a changed checkpoint or setting makes new units. The run id
is a hash of the same settings and the set of units: re-running the same command continues the same run.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sago_fast.checkpoints.adapters import is_adapter_folder
from sago_fast.checkpoints.entries import ModelEntry, model_entries
from sago_fast.checkpoints.resolve import Checkpoint, resolve_checkpoint, resolve_each
from sago_fast.datasets.load import Dataset, load_dataset
from sago_fast.errors import CheckpointError, InputError, SagoError
from sago_fast.run.config import RunConfig
from sago_fast.types import Variant
from sago_fast.variants import VariantConfig, generate_variants
from sago_fast.variants.design import CellDesign, draw_cells, most_preserving_families

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Unit:
    unit_id: str
    index: int  # position in the plan (shards take every N-th unit)
    checkpoint: Checkpoint
    dataset_id: str
    shard: int = 0
    aliases: tuple[Checkpoint, ...] = ()  # every named checkpoint with this content (``checkpoint`` first)
    design: CellDesign = CellDesign()  # which item × family cells it renders

    @property
    def model_id(self) -> str:
        return self.checkpoint.content_hash


@dataclass(frozen=True)
class Plan:
    run_id: str
    datasets: dict[str, Dataset]
    variants: dict[str, list[Variant]]
    units: tuple[Unit, ...]
    skipped: tuple[tuple[str, str], ...] = ()  # (training-run member, why) left out of the run

    def by_checkpoint(self, units: Sequence[Unit]) -> list[tuple[Checkpoint, list[Unit]]]:
        """Units grouped by checkpoint content, in plan order (one model load per group)."""
        groups: dict[str, tuple[Checkpoint, list[Unit]]] = {}
        for unit in units:
            groups.setdefault(unit.model_id, (unit.checkpoint, []))[1].append(unit)
        return list(groups.values())


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
        # only when set: the units of runs without them keep their ids
        **({"precision": config.precision} if config.precision is not None else {}),
        **({"budget": config.budget} if config.budget is not None else {}),
        **({"until_separated": True} if config.until_separated else {}),
    }


def plan_run(config: RunConfig) -> Plan:
    """Datasets, variants and units of ``config``; validates everything before any model is exported."""
    fields = config.field_map
    datasets = [
        load_dataset(name, fields=fields, limit=config.limit, seed=config.seed) for name in config.datasets
    ]
    if config.fields and not any(d.reader == "sago" for d in datasets):
        raise InputError(
            f"--field {config.fields[0]}: field mappings apply to data files in sago's schema, and none of the "
            f"datasets is one ({', '.join(f'{d.name}: {d.reader}' for d in datasets)}); leave --field out"
        )
    for dataset in datasets:
        if config.num_fewshot and dataset.reader == "lmeval":
            raise InputError(
                f"--num-fewshot {config.num_fewshot}: {dataset.source}: an lm-eval task's demonstrations are "
                "its own (num_fewshot in the YAML), rendered and varied in its prompt"
            )
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
    design = config.cell_design
    variants = {}
    for d in datasets:
        rendered = generate_variants(d.examples, variant_config, config.fewshot_from or d.name)
        design.check_families(most_preserving_families(rendered), f"any item of {d.name}")
        variants[d.dataset_id] = draw_cells(rendered, design, config.seed)
    groups: dict[str, list[Checkpoint]] = {}
    resolved, skipped = _resolve_all(model_entries(config.models), config.base)
    for checkpoint in resolved:  # same content twice: evaluated once, recorded under every name
        groups.setdefault(checkpoint.content_hash, []).append(checkpoint)
    for same in groups.values():
        if len(same) > 1:
            log.info(
                "%s: identical content; evaluated once, recorded under all %d names",
                ", ".join(str(c.display_path) for c in same),
                len(same),
            )
    settings = result_settings(config)
    units: list[Unit] = []
    for same in groups.values():
        checkpoint = same[0]
        for data in datasets:
            unit_id = _digest([settings, checkpoint.content_hash, data.dataset_id, 0])
            units.append(
                Unit(unit_id, len(units), checkpoint, data.dataset_id, aliases=tuple(same), design=design)
            )
    run_id = "run-" + _digest([settings, sorted(u.unit_id for u in units)])
    return Plan(run_id, {d.dataset_id: d for d in datasets}, variants, tuple(units), tuple(skipped))


def _resolve_all(
    entries: Sequence[ModelEntry], base: str | None = None
) -> tuple[list[Checkpoint], list[tuple[str, str]]]:
    """Each entry resolved and content-hashed, in order (:func:`resolve_each`: folders on a few threads at
    once), and the training-run members that could not be (logged, one line each). The first failure of
    any other entry is raised."""
    bases: dict[str, Checkpoint] = {}

    def resolve(i: int) -> Checkpoint | str:
        entry = entries[i]
        try:
            return resolve_checkpoint(entry.text, base=_base_of(entry.text, base, bases))
        except SagoError as exc:
            if not entry.in_run:
                raise
            return str(exc)

    results = resolve_each([e.text for e in entries], resolve)
    resolved = [r for r in results if isinstance(r, Checkpoint)]
    skipped = [(e.text, r) for e, r in zip(entries, results, strict=True) if isinstance(r, str)]
    for where, why in skipped:
        log.error("skipped training-run member %s: %s", where, why)
    if not resolved:
        raise CheckpointError(
            f"no checkpoint could be read ({len(skipped)} skipped; the first: {skipped[0][1]})"
        )
    return resolved, skipped


def _base_of(text: str, base: str | None, bases: dict[str, Checkpoint]) -> Checkpoint | None:
    """The resolved base of an adapter folder (each base resolved once per plan); None for others."""
    from sago_fast.checkpoints.adapters import base_reference, read_adapter_config

    folder = Path(text).expanduser()
    if not is_adapter_folder(folder):
        return None
    reference = base_reference(folder, read_adapter_config(folder), base)
    if reference not in bases:
        bases[reference] = resolve_checkpoint(reference)
    return bases[reference]


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
