"""An lm-evaluation-harness task YAML with local data as a sago dataset: ``--dataset lmeval:TASK.yaml``.

lm-eval builds the task from the YAML (``include:`` and ``!function`` as lm-eval reads them; data from
``dataset_path`` + ``dataset_kwargs: data_files``, relative paths resolved beside the YAML first) and
renders each document of its evaluation split (test, else validation) with the task's own
``fewshot_context`` (description, the configured few-shot examples with lm-eval's default seed, and
``doc_to_text``), ``doc_to_choice`` and ``doc_to_target``. That prompt, byte for byte, is the example's
canonical rendering; sago takes it apart so that the families can vary it
(:mod:`sago_fast.lmeval.prompt_parts`: the options, the question, the field names, the instruction and
the demonstrations, all found in the document's own turn after any demonstrations).

Multiple-choice tasks become multiple-choice examples (with label choices, ``--answer-mode letter``
scores what lm-eval scores); ``generate_until`` tasks become generation examples with the target as the
reference answer. A task that cannot be taken apart is one line naming the YAML, the document and field.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sago_fast.errors import InputError
from sago_fast.lmeval.prompt_parts import LABELS, labelled_options, question_span, shown_options, with_parts
from sago_fast.types import Dataset, Example, PromptLayout

log = logging.getLogger(__name__)

PREFIX = "lmeval:"
FEWSHOT_SEED = 1234  # lm-eval's default fewshot_random_seed


def load_lmeval_task(spec: str, limit: int | None = None) -> Dataset:
    """The examples of the task YAML named by ``spec`` (``lmeval:path/to/task.yaml``)."""
    path = Path(spec[len(PREFIX) :] if spec.startswith(PREFIX) else spec).expanduser()
    if not path.is_file():
        raise InputError(f"{path}: no such lm-eval task YAML")
    task = build_task(path)
    name = str(task.config.task)
    output_type = task.config.output_type
    if output_type not in ("multiple_choice", "generate_until"):
        raise InputError(
            f"{path}: field 'output_type': {output_type!r}; sago reads multiple_choice and generate_until tasks"
        )
    docs = list(task.eval_docs)
    if limit is not None:
        docs = docs[:limit]
    if not docs:
        raise InputError(f"{path}: the task's evaluation split has no documents")
    task.set_fewshot_seed(seed=FEWSHOT_SEED)
    shots = 0 if task.config.num_fewshot is None else int(task.config.num_fewshot)
    examples = []
    for doc_id, doc in enumerate(docs):
        where = f"{path}: doc {doc_id}"
        prompt, turns = context_and_turns(task, doc, shots)
        if not isinstance(prompt, str):
            raise InputError(f"{where}: field 'doc_to_text': the prompt is not one text")
        example_id = f"{name}/{doc_id}"
        own = len(prompt) - len(turns[-1]) if turns else 0  # the document's own turn starts here
        if output_type == "multiple_choice":
            example = multiple_choice_example(example_id, prompt, doc, task, where, own)
        else:
            example = generation_example(example_id, prompt, doc, task, where, own)
        examples.append(with_parts(example, turns, shots))
    digest = hashlib.sha256(path.read_bytes())
    for example in examples:
        digest.update(repr((example.layout, example.options, example.answer_index, example.answers)).encode())
    log.info("lm-eval task %s: %d documents", name, len(examples))
    return Dataset(f"{name}-{digest.hexdigest()[:12]}", name, str(path), tuple(examples), "lmeval")


def build_task(path: Path) -> Any:
    """lm-eval's ``ConfigurableTask`` of the YAML at ``path``, its local data files found beside it."""
    try:
        from lm_eval.api.task import ConfigurableTask
        from lm_eval.tasks._yaml_loader import load_yaml
    except ImportError:
        raise InputError("lmeval: datasets need lm-eval: pip install 'sago_fast[lmeval]'") from None
    try:
        config = load_yaml(path)
    except Exception as exc:
        raise InputError(f"{path}: not a readable lm-eval task YAML ({str(exc).splitlines()[0]})") from None
    for field in ("task", "dataset_path", "doc_to_text"):
        if field not in config:
            raise InputError(f"{path}: field '{field}' is missing")
    check_local_data(path, config)
    data_files_beside(config, path.parent)
    quiet = logging.getLogger("lm_eval")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # its notes on default metrics, as lm-eval itself prints them per run
    try:
        return ConfigurableTask(config=config)
    except Exception as exc:
        raise InputError(f"{path}: lm-eval could not build the task ({str(exc).splitlines()[0]})") from None
    finally:
        quiet.setLevel(level)


def context_and_turns(task: Any, doc: Any, shots: int) -> tuple[Any, list[str]]:
    """lm-eval's context for ``doc`` (``fewshot_context``), and the text of each question-answer turn it
    is built from, in order: the ``shots`` demonstrations', then the document's own ([] where this lm-eval
    builds it otherwise)."""
    build = getattr(task, "build_qa_turn", None)
    turns: list[str] = []

    def recorded(**kwargs: Any) -> Any:
        messages = build(**kwargs)  # type: ignore[misc]
        turns.append("".join(m.to_text() for m in messages))
        return messages

    if build is not None:
        task.build_qa_turn = recorded  # this call only: the instance attribute is removed below
    try:
        prompt = task.fewshot_context(doc, num_fewshot=shots, gen_prefix=task.doc_to_prefix(doc))
    finally:
        if build is not None:
            del task.build_qa_turn
    body = "".join(turns)
    if len(turns) != shots + 1 or not isinstance(prompt, str) or not prompt.endswith(body):
        turns = []  # a chat template, several inputs, another lm-eval: no parts beyond the question
    return prompt, turns


def data_files_beside(config: dict[str, Any], folder: Path) -> None:
    """A task config's relative ``data_files`` that exist in ``folder`` (its YAML's) made absolute, in place."""
    kwargs = dict(config.get("dataset_kwargs") or {})
    if "data_files" in kwargs:
        kwargs["data_files"] = _beside(folder, kwargs["data_files"])
        config["dataset_kwargs"] = kwargs


@contextmanager
def data_files_found_beside_yaml() -> Iterator[None]:
    """While open, lm-eval's own task loading (``sago lm-eval``) finds a task's relative ``data_files``
    beside its YAML first, as ``sago run -d lmeval:`` does (lm-eval alone reads them from the current
    folder, where they are still found when not beside the YAML)."""
    from lm_eval.tasks._factory import TaskFactory

    original = TaskFactory._load_full_config

    def load_full_config(self: Any, entry: Any, overrides: Any = None) -> dict[str, Any]:
        config = original(self, entry, overrides)
        if getattr(entry, "yaml_path", None):
            data_files_beside(config, Path(entry.yaml_path).parent)
        return config

    TaskFactory._load_full_config = load_full_config
    try:
        yield
    finally:
        TaskFactory._load_full_config = original


LOCAL_BUILDERS = ("json", "csv", "parquet", "text", "arrow", "pandas")  # datasets' loaders of local files


def check_local_data(path: Path, config: dict[str, Any]) -> None:
    """Before lm-eval builds the task: its data must be local (a file loader with ``data_files``, or a
    folder); a hub dataset (``dataset_path: cais/mmlu``) is refused in one line instead of a download
    that fails after its retries."""
    source = str(config["dataset_path"])
    if source in LOCAL_BUILDERS:
        if not (config.get("dataset_kwargs") or {}).get("data_files"):
            raise InputError(f"{path}: field 'dataset_path': {source!r} needs dataset_kwargs: data_files")
        return
    if (path.parent / source).expanduser().exists() or Path(source).expanduser().exists():
        return
    raise InputError(
        f"{path}: field 'dataset_path': {source!r} is not a local file or folder (a Hugging Face hub dataset?); "
        f"sago reads a task's data from local files: dataset_path: json (or {', '.join(LOCAL_BUILDERS[1:])}) "
        "with dataset_kwargs: data_files"
    )


def _beside(folder: Path, files: Any) -> Any:
    """``data_files`` with each relative path that exists beside the YAML made absolute."""
    if isinstance(files, str):
        local = folder / files
        return str(local) if not Path(files).is_absolute() and local.exists() else files
    if isinstance(files, Mapping):
        return {k: _beside(folder, v) for k, v in files.items()}
    if isinstance(files, Sequence):
        return [_beside(folder, f) for f in files]
    return files


def _choices(task: Any, doc: Any, where: str) -> list[str]:
    choices = task.doc_to_choice(doc)
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
        raise InputError(f"{where}: field 'doc_to_choice' must give at least 2 texts, not {choices!r}")
    return choices


def _target(task: Any, doc: Any, choices: Sequence[str], where: str) -> int:
    target = task.doc_to_target(doc)
    if isinstance(target, str) and target in choices:
        return choices.index(target)
    if isinstance(target, str) and target.strip().isdigit():
        target = int(target.strip())
    if isinstance(target, int) and not isinstance(target, bool) and 0 <= target < len(choices):
        return target
    raise InputError(f"{where}: field 'doc_to_target': {target!r} is not one of the {len(choices)} choices")


def multiple_choice_example(
    example_id: str, prompt: str, doc: Any, task: Any, where: str, own: int = 0
) -> Example:
    """The document's example, its layout found from offset ``own`` (its own turn, after any
    demonstrations)."""
    choices = _choices(task, doc, where)
    answer = _target(task, doc, choices, where)
    label_choices = choices == [LABELS[j] for j in range(len(choices))]
    labels: list[tuple[int, int]] = []
    listed = labelled_options(prompt, len(choices), own) if label_choices else None
    if label_choices and listed is None:
        raise InputError(
            f"{where}: field 'doc_to_choice': the choices are labels {choices}, but the prompt does not "
            "list the options as lines 'A. text'"
        )
    if listed is not None:
        labels, spans = listed
    else:
        spans = shown_options(prompt, choices, own) or []
    options = [prompt[s:e] for s, e in spans] if listed is not None else list(choices)
    first = spans[0][0] if spans else len(prompt)
    if labels:
        first = min(first, labels[0][0])
    question = question_span(prompt, doc, first, where, own)
    layout = PromptLayout(prompt, question, tuple(spans), tuple(labels))
    return Example(
        example_id,
        "multiple_choice",
        prompt[question[0] : question[1]],
        tuple(options),
        answer,
        layout=layout,
    )


def generation_example(
    example_id: str, prompt: str, doc: Any, task: Any, where: str, own: int = 0
) -> Example:
    target = task.doc_to_target(doc)
    given = [target] if isinstance(target, str | int) else list(target) if isinstance(target, list) else []
    answers = [str(a) for a in given if str(a).strip()]
    if not answers:
        raise InputError(f"{where}: field 'doc_to_target': no reference answer ({target!r})")
    question = question_span(prompt, doc, len(prompt), where, own)
    layout = PromptLayout(prompt, question)
    return Example(
        example_id, "generation", prompt[question[0] : question[1]], (), None, tuple(answers), layout=layout
    )
