"""Run configuration: a frozen dataclass, from CLI options or a YAML file."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from sago_fast import defaults
from sago_fast.answers.answering import AnswerSettings
from sago_fast.answers.multiple_choice import DEFAULT_ANSWER_MODE, check_answer_mode
from sago_fast.answers.prompting import PromptFormat
from sago_fast.datasets.readers import FieldMap
from sago_fast.errors import InputError
from sago_fast.run.sequential import SequentialSettings
from sago_fast.run.stream_settings import StreamSettings
from sago_fast.runtime.decode import GenerationSettings
from sago_fast.runtime.session import DEVICES


@dataclass(frozen=True)
class RunConfig:
    """models: checkpoint paths (or hub ids). datasets: built-in suite names or data files.

    families: perturbation families (None = all registered); variants_per_family: k; limit: first N
    examples of each dataset; device: cpu | cuda | auto; db: DuckDB results file; seed: variant seed;
    cache_dir: export cache (default ~/.cache/sago_fast/exports); max_new_tokens and stop: greedy
    generation limits for generation tasks (the answer is cut before the first stop string); stats: run
    ``sago stats`` on the finished run (default seed, 2000 resamples). executor: local | ray;
    shard "i/N" with shard_dir: evaluate every N-th unit from the i-th and write Parquet unit folders
    under shard_dir instead of the database (merge them with ``sago merge``); ray_cpus_per_task,
    ray_max_retries: Ray task resources and retries on worker failure.

    answer_mode: the multiple-choice answer mode the axes read (cloze, cloze_norm, letter; every mode is
    stored in ``mode_answers``); chat_template: "none" (plain prompts) or "auto" (the tokenizer's chat
    template when it has one); system_prompt: the system turn of every prompt; num_fewshot: demonstrations
    per prompt, drawn (seeded, never the example itself) from ``fewshot_from`` (a data file or suite) or
    else from the dataset itself; fields: ``NAME=SOURCE`` field mappings for data files (as ``sago
    variants --field``; dotted sources read nested fields, ``answer_offset=1`` for 1-based answers).
    base: the base model of LoRA adapter folders among ``models`` (default: each adapter's
    ``base_model_name_or_path``). precision: sequential units that stop once every followed metric's
    anytime-valid confidence sequence has this half-width (metric units); budget: at most this many
    examples per (model, dataset), visited in a seeded random order (see :mod:`sago_fast.run.sequential`);
    until_separated: the units stop once their comparisons with the neighbouring models (in run order) are
    settled, the sign of each followed metric's difference known or its half-width within ``precision``
    (the models advance together in this process; see :mod:`sago_fast.run.separation`).
    """

    models: tuple[str, ...]
    datasets: tuple[str, ...]
    db: Path | None = None
    families: tuple[str, ...] | None = None
    variants_per_family: int = defaults.VARIANTS_PER_FAMILY
    limit: int | None = None
    device: str = defaults.DEVICE
    seed: int = defaults.SEED
    cache_dir: Path | None = None
    max_new_tokens: int = defaults.MAX_NEW_TOKENS
    stop: tuple[str, ...] = defaults.STOP
    stats: bool = True
    executor: str = defaults.EXECUTOR
    shard: str | None = None
    shard_dir: Path | None = None
    ray_cpus_per_task: float = 1.0
    ray_max_retries: int = 2
    answer_mode: str = DEFAULT_ANSWER_MODE
    chat_template: str = defaults.CHAT_TEMPLATE
    system_prompt: str | None = None
    num_fewshot: int = defaults.NUM_FEWSHOT
    fewshot_from: str | None = None
    fields: tuple[str, ...] = ()
    chunk_memory_mb: float = defaults.CHUNK_MEMORY_MB
    sample_memory_mb: float = defaults.SAMPLE_MEMORY_MB
    base: str | None = None
    precision: float | None = None
    budget: int | None = None
    until_separated: bool = False

    def __post_init__(self) -> None:
        check_field_types(self)
        if not self.models:
            raise InputError("no --model given")
        if not self.datasets:
            raise InputError("no --dataset given")
        if self.shard is not None and self.shard_dir is None:
            raise InputError("--shard needs --shard-dir (the folder its Parquet unit folders go to)")
        if self.shard is None and self.db is None:
            raise InputError("--db is required (or --shard i/N with --shard-dir)")
        if self.shard is not None and self.db is not None:
            raise InputError(
                f"--shard writes Parquet unit folders to --shard-dir, not to --db ({self.db}): leave --db out "
                "and merge the folders into it afterwards with `sago merge SHARD_DIR... --db FILE`"
            )
        if self.executor not in ("local", "ray"):
            raise InputError(f"unknown executor {self.executor!r} (known: local, ray)")
        if self.ray_cpus_per_task <= 0 or self.ray_max_retries < 0:
            raise InputError("ray_cpus_per_task must be positive and ray_max_retries not negative")
        if self.variants_per_family < 1:
            raise InputError(
                f"-k/--variants-per-family (variants_per_family) must be at least 1, not {self.variants_per_family}"
            )
        if self.limit is not None and self.limit < 1:
            raise InputError(f"--limit (limit) must be at least 1, not {self.limit}")
        if self.max_new_tokens < 1:
            raise InputError(
                f"--max-new-tokens (max_new_tokens) must be at least 1, not {self.max_new_tokens}"
            )
        if self.device not in DEVICES:
            raise InputError(f"--device (device) must be one of {', '.join(DEVICES)}, not {self.device!r}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise InputError(f"stop strings must be non-empty strings, not {list(self.stop)!r}")
        check_answer_mode(self.answer_mode)
        PromptFormat(self.chat_template, self.system_prompt)  # validates both
        if not isinstance(self.num_fewshot, int) or self.num_fewshot < 0:
            raise InputError(
                f"--num-fewshot (num_fewshot) must be a non-negative integer, not {self.num_fewshot!r}"
            )
        FieldMap.parse(list(self.fields))  # an unknown field name is one line
        self.stream_settings  # noqa: B018  (validates the memory budgets)
        self.sequential  # noqa: B018  (validates precision and budget)
        if self.until_separated and (self.executor != "local" or self.shard is not None):
            raise InputError(
                "--until-separated runs the compared models together in this process: it needs the local "
                "executor and no --shard"
            )
        if self.fewshot_from is not None and self.num_fewshot == 0:
            raise InputError("--fewshot-from needs --num-fewshot N (how many demonstrations per prompt)")

    @property
    def stream_settings(self) -> StreamSettings:
        return StreamSettings(self.chunk_memory_mb, self.sample_memory_mb, self.seed)

    @property
    def sequential(self) -> SequentialSettings:
        return SequentialSettings(
            self.precision, self.budget, seed=self.seed, until_separated=self.until_separated
        )

    @property
    def generation(self) -> GenerationSettings:
        return GenerationSettings(max_new_tokens=self.max_new_tokens, stop=tuple(self.stop))

    @property
    def field_map(self) -> FieldMap:
        return FieldMap.parse(list(self.fields))

    @property
    def prompt_format(self) -> PromptFormat:
        return PromptFormat(chat_template=self.chat_template, system_prompt=self.system_prompt)

    @property
    def answer_settings(self) -> AnswerSettings:
        return AnswerSettings(self.generation, self.prompt_format, self.answer_mode)

    @property
    def shot_answer(self) -> str:
        """How demonstrations show their answer: the label under ``letter``, the option text otherwise."""
        return "label" if self.answer_mode == "letter" else "text"

    def as_json(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str], **overrides: Any) -> RunConfig:
        """Keys as the field names (``models``, ``datasets``, ``db``, ...); CLI values override."""
        import yaml

        file = Path(path)
        if not file.is_file():
            raise InputError(f"{file}: no such config file")
        try:
            data = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise InputError(f"{file}: invalid YAML ({str(exc).splitlines()[0]})") from None
        if not isinstance(data, dict):
            raise InputError(f"{file}: expected a mapping of run settings")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(
                f"{file}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            )
        merged = {**data, **{k: v for k, v in overrides.items() if v not in (None, (), [])}}
        if overrides.get("shard") is not None and overrides.get("db") is None:
            merged.pop("db", None)  # `--shard` on the command line: the config's db is for the unsharded run
        if isinstance(merged.get("fields"), dict):  # YAML mapping {question: question.stem, ...}
            merged["fields"] = [f"{k}={v}" for k, v in merged["fields"].items()]
        for key in ("models", "datasets", "families", "stop", "fields"):
            if isinstance(merged.get(key), str):
                merged[key] = [merged[key]]
            if isinstance(merged.get(key), list):  # anything else is named by the type check
                merged[key] = tuple(str(x) for x in merged[key])
        if "db" not in merged and "shard_dir" not in merged:
            raise InputError(f"{file}: no 'db' (results file) given")
        try:
            return cls(**merged)
        except InputError as exc:
            raise InputError(f"{file}: {exc}") from None


_KINDS: dict[type, str] = {
    bool: "true or false",
    int: "a whole number",
    float: "a number",
    str: "a string",
    Path: "a path",
    tuple: "a list of strings",
}


def check_field_types(config: Any) -> None:
    """InputError (one line, naming the field) for a value of the wrong type in a frozen dataclass of
    settings (from a YAML file or Python), before any of its checks compare or parse it. A string is taken
    for a path, and a list of strings for a tuple (stored as ``Path`` and ``tuple``)."""
    hints = get_type_hints(type(config))
    for f in fields(config):
        value = getattr(config, f.name)
        hint = hints[f.name]
        alternatives = get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)
        accepted = [get_origin(t) or t for t in alternatives]
        if value is None and type(None) in accepted:
            continue
        kinds = [k for k in accepted if k is not type(None)]
        if Path in kinds and isinstance(value, (str, os.PathLike)):
            object.__setattr__(config, f.name, Path(value))
        elif tuple in kinds and isinstance(value, list) and all(isinstance(v, str) for v in value):
            object.__setattr__(config, f.name, tuple(value))
        elif not any(_is_kind(value, kind) for kind in kinds):
            wanted = " or ".join(_KINDS.get(k, k.__name__) for k in kinds)
            raise InputError(f"{f.name} must be {wanted}, not {value!r}")


def _is_kind(value: Any, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind in (int, float):  # a bool is not a number here; an int is a float
        allowed = (int,) if kind is int else (int, float)
        return isinstance(value, allowed) and not isinstance(value, bool)
    if kind is tuple:
        return isinstance(value, tuple) and all(isinstance(v, str) for v in value)
    return isinstance(value, kind)
