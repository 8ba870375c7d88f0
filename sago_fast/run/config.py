"""Run configuration: a frozen dataclass, from CLI options or a YAML file."""

from __future__ import annotations

import os
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from sago_fast import defaults
from sago_fast.answers.answering import AnswerSettings
from sago_fast.answers.multiple_choice import DEFAULT_ANSWER_MODE, check_answer_mode
from sago_fast.answers.prompting import PromptFormat
from sago_fast.datasets.readers import FieldMap
from sago_fast.errors import InputError
from sago_fast.runtime.decode import GenerationSettings
from sago_fast.runtime.session import DEVICES
from sago_fast.units.sequential import SequentialSettings
from sago_fast.units.stream_settings import StreamSettings
from sago_fast.variants.design import CellDesign


def option(default: Any, *flags: str, help: str) -> Any:
    """A :class:`RunConfig` field declared once: its default, its ``sago run`` flags (none: YAML and Python
    only) and its help. The command line (:func:`sago_fast.cli.run.run_command_for`) and the YAML keys
    (:meth:`RunConfig.from_yaml`: the field names) are derived from the fields; a bool whose flag starts
    with ``--no-`` turns it off."""
    return field(default=default, metadata={"flags": flags, "help": help})


@dataclass(frozen=True)
class RunConfig:
    """The settings of a run, each declared once with its ``sago run`` flags and help (:func:`option`): the
    command line and the YAML keys (the field names) come from these fields. Checks that span several
    settings are in ``__post_init__``. ``models`` and ``datasets`` are required; ``db`` too, unless the run
    is sharded (``shard`` "i/N" with ``shard_dir``: every N-th unit from the i-th into Parquet unit folders,
    merged with ``sago merge``). A sequential run: ``precision`` / ``budget`` (:mod:`sago_fast.units.sequential`),
    ``until_separated`` (:mod:`sago_fast.units.separation`)."""

    models: tuple[str, ...] = option(
        MISSING,
        "--model",
        "-m",
        help="Checkpoint directory, training-run folder (checkpoint-N/, step-N/, ...), LoRA adapter folder, "
        ".gguf file or hub id (repeatable).",
    )
    datasets: tuple[str, ...] = option(
        MISSING, "--dataset", "-d", help="Built-in suite or data file (repeatable)."
    )
    db: Path | None = option(None, "--db", help="DuckDB results file (appended to).")
    families: tuple[str, ...] | None = option(
        None, "--families", "-F", help="Families to use (repeatable; default all)."
    )
    variants_per_family: int = option(
        defaults.VARIANTS_PER_FAMILY,
        "--variants-per-family",
        "-k",
        help=f"Variants per family (default {defaults.VARIANTS_PER_FAMILY}).",
    )
    design: str = option(
        defaults.DESIGN,
        "--design",
        help="Which item × family cells to render: full (every applicable family of every item) or sampled "
        f"(m of each item's meaning-preserving families, --families-per-item); default {defaults.DESIGN}.",
    )
    families_per_item: int | None = option(
        None,
        "--families-per-item",
        help="--design sampled: meaning-preserving families drawn per item (balanced, seeded by the item; "
        f"default {defaults.FAMILIES_PER_ITEM}).",
    )
    limit: int | None = option(None, "--limit", help="First N examples of each dataset.")
    device: str = option(
        defaults.DEVICE,
        "--device",
        help=f"cpu, cuda, or auto (CUDA when it really runs); default {defaults.DEVICE}.",
    )
    seed: int = option(defaults.SEED, "--seed", help=f"Variant seed (default {defaults.SEED}).")
    cache_dir: Path | None = option(
        None,
        "--cache-dir",
        help="Export cache folder (default $SAGO_CACHE_DIR/exports or ~/.cache/sago_fast/exports).",
    )
    max_new_tokens: int = option(
        defaults.MAX_NEW_TOKENS,
        "--max-new-tokens",
        help=f"Generation tasks: tokens generated at most (default {defaults.MAX_NEW_TOKENS}).",
    )
    stop: tuple[str, ...] = option(
        defaults.STOP,
        "--stop",
        help=f"Generation tasks: stop string (repeatable; default {', '.join(map(repr, defaults.STOP))}; "
        "'\\n' and '\\t' are read as escapes).",
    )
    stats: bool = option(True, "--no-stats", help="Skip the statistics at the end (run `sago stats` later).")
    executor: str = option(
        defaults.EXECUTOR,
        "--executor",
        help=f"local or ray (extra sago_fast[ray]; RAY_ADDRESS joins a cluster); default {defaults.EXECUTOR}.",
    )
    shard: str | None = option(
        None, "--shard", help="i/N: evaluate every N-th unit from the i-th (job arrays); needs --shard-dir."
    )
    shard_dir: Path | None = option(
        None, "--shard-dir", help="Folder for the Parquet unit folders of --shard (merge with `sago merge`)."
    )
    ray_cpus_per_task: float = option(1.0, help="Ray: CPUs each task takes (YAML and Python only).")
    ray_max_retries: int = option(2, help="Ray: retries of a task on worker failure (YAML and Python only).")
    answer_mode: str = option(
        DEFAULT_ANSWER_MODE,
        "--answer-mode",
        help="Multiple choice: cloze (option text, lm-eval acc), cloze_norm (per character, lm-eval "
        f"acc_norm) or letter (the option label, MMLU/HELM); default {DEFAULT_ANSWER_MODE}. All modes are "
        "stored.",
    )
    chat_template: str = option(
        defaults.CHAT_TEMPLATE,
        "--chat-template",
        help="none (plain prompts) or auto (the tokenizer's chat template when it has one); default "
        f"{defaults.CHAT_TEMPLATE}.",
    )
    system_prompt: str | None = option(
        None, "--system-prompt", help="System turn (or first paragraph) of every prompt."
    )
    num_fewshot: int = option(
        defaults.NUM_FEWSHOT,
        "--num-fewshot",
        help=f"Demonstrations per prompt, never the example itself (default {defaults.NUM_FEWSHOT}).",
    )
    fewshot_from: str | None = option(
        None,
        "--fewshot-from",
        help="Data file (a train/dev split) the demonstrations come from (default: the dataset).",
    )
    fields: tuple[str, ...] = option(
        (),
        "--field",
        help="Data files: NAME=SOURCE field mapping (repeatable), e.g. question=question.stem, "
        "answer_offset=1.",
    )
    chunk_memory_mb: float = option(
        defaults.CHUNK_MEMORY_MB,
        "--chunk-memory-mb",
        help="Each unit is answered and committed in chunks of examples whose next-token and hidden-state "
        f"arrays fit in this many MB (default {defaults.CHUNK_MEMORY_MB}).",
    )
    sample_memory_mb: float = option(
        defaults.SAMPLE_MEMORY_MB,
        "--sample-memory-mb",
        help="kNN instability and CKA keep example activations up to this many MB, then use a seeded "
        f"sample of examples (default {defaults.SAMPLE_MEMORY_MB}).",
    )
    base: str | None = option(
        None,
        "--base",
        help="Base model of the LoRA adapters among --model (default: each adapter's base_model_name_or_path).",
    )
    precision: float | None = option(
        None,
        "--precision",
        help="Sequential units: visit examples in a seeded random order and stop once every followed "
        "metric's anytime-valid 95% confidence sequence has this half-width (in the metric's units).",
    )
    budget: int | None = option(
        None,
        "--budget",
        help="At most this many examples per (model, dataset), in the seeded visiting order.",
    )
    until_separated: bool = option(
        False,
        "--until-separated",
        help="With --precision H: the models advance together and each unit stops once its comparisons "
        "with the neighbouring models (run order) are settled: for every followed metric, the sign of "
        "the paired difference known or its anytime-valid half-width within H.",
    )

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
        self.cell_design  # noqa: B018  (validates the design and m)
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
    def cell_design(self) -> CellDesign:
        return CellDesign(self.design, self.families_per_item)

    @property
    def stream_settings(self) -> StreamSettings:
        return StreamSettings(self.chunk_memory_mb, self.sample_memory_mb, self.seed)

    @property
    def sequential(self) -> SequentialSettings:
        return SequentialSettings(
            self.precision,
            self.budget,
            seed=self.seed,
            until_separated=self.until_separated,
            cells_until_known=self.design == "sampled" and not self.until_separated,
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
