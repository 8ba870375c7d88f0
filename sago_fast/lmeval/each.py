"""Many checkpoints through lm-eval, one after the other, on one export: ``sago lm-eval`` and
:func:`evaluate_each`.

``pretrained`` may name many checkpoints as ``sago run -m`` does (a training-run folder, a glob, a list
file). Each is evaluated in turn in this process: lm-eval is imported once, what it would build again for
every run is built once (:func:`reused_per_command`), and sibling checkpoints (same architecture) open the
first one's export with their own weights (no re-export).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sago_fast.errors import InputError, SagoError
from sago_fast.lmeval import MODEL_NAMES
from sago_fast.lmeval.arguments import check_batch_size, preflight
from sago_fast.lmeval.environment import environment_report_reused
from sago_fast.lmeval.task_index import task_index_reused

log = logging.getLogger(__name__)

MODEL_ARGS = "--model_args"
PRETRAINED = re.compile(r"(?:^|,)pretrained=([^,]*)")


@contextmanager
def reused_per_command() -> Iterator[None]:
    """While open, what lm-eval builds for every run is built once for the command's many checkpoints:
    its task index (:func:`sago_fast.lmeval.task_index.task_index_reused`; the index of lm-eval's own tasks
    also kept across commands, per lm-eval version) and its environment report
    (:func:`sago_fast.lmeval.environment.environment_report_reused`). A task's relative ``data_files``
    are found beside its YAML, as ``sago run -d lmeval:`` finds them
    (:func:`sago_fast.lmeval.tasks.data_files_found_beside_yaml`)."""
    from sago_fast.lmeval.tasks import data_files_found_beside_yaml

    with task_index_reused(), environment_report_reused(), data_files_found_beside_yaml():
        yield


def split_model_args(text: str) -> tuple[str, str]:
    """(``pretrained`` value, the other arguments) of lm-eval's ``key=value,...`` string."""
    found = PRETRAINED.search(text)
    if found is None:
        raise InputError(f"{MODEL_ARGS} {text!r}: no pretrained=PATH (the checkpoint to evaluate)")
    rest = (text[: found.start()] + text[found.end() :]).strip(",")
    return found.group(1), rest


def checkpoints_of(pretrained: str) -> list[str]:
    """The checkpoints ``pretrained`` names (:func:`sago_fast.checkpoints.entries.expand_models`)."""
    from sago_fast.checkpoints.entries import expand_models

    return expand_models([pretrained])


def _option(argv: list[str], name: str) -> tuple[int, str] | None:
    """(index, value) of ``name VALUE`` or ``name=VALUE`` in ``argv``."""
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            return i, argv[i + 1]
        if word.startswith(name + "="):
            return i, word.split("=", 1)[1]
    return None


def _set_option(argv: list[str], name: str, value: str) -> list[str]:
    found = _option(argv, name)
    if found is None:
        return [*argv, name, value]
    i, _ = found
    if argv[i] == name:
        return [*argv[: i + 1], value, *argv[i + 2 :]]
    return [*argv[:i], f"{name}={value}", *argv[i + 1 :]]


def lmeval_argvs(argv: Sequence[str]) -> list[tuple[str, list[str]]]:
    """One lm-eval command line per checkpoint of ``--model_args pretrained=...``: the model set to
    ``sago`` unless another is named, a ``device=`` of the model arguments moved to ``--device`` (lm-eval
    passes both to the model), or ``--device auto`` when none is given; with the sago backend and no batch
    size given, ``--batch_size auto``: sago's token budget rather than lm-eval's default of one prompt a
    call (on 200 real 0-shot MMLU prompts 10% less time, every log-likelihood as close to ``hf``'s).
    (lm-eval's ``--output_path`` keeps each checkpoint's results apart already, in a folder named after
    its path.)"""
    argv = list(argv)
    if _option(argv, "--model") is None:
        argv = ["--model", "sago", *argv]
    found = _option(argv, MODEL_ARGS)
    if found is None:
        raise InputError(f"{MODEL_ARGS} pretrained=PATH is required (the checkpoint to evaluate)")
    pretrained, rest = split_model_args(found[1])
    for name in ("device", "batch_size"):  # lm-eval passes --NAME beside model_args: one of the two
        given = re.search(rf"(?:^|,){name}=([^,]*)", rest)
        if given is None:
            continue
        rest = (rest[: given.start()] + rest[given.end() :]).strip(",")
        flag = _option(argv, f"--{name}")
        if flag is not None and flag[1] != given.group(1):
            raise InputError(
                f"{MODEL_ARGS} {name}={given.group(1)} and --{name} {flag[1]} disagree: give one of them"
            )
        if flag is None:
            argv = [*argv, f"--{name}", given.group(1)]
    model = _option(argv, "--model")
    if model is not None and model[1] in MODEL_NAMES:
        if _option(argv, "--device") is None:
            argv = [*argv, "--device", "auto"]  # not lm-eval's default cuda:0: CUDA where it runs, quietly
        batch = _option(argv, "--batch_size")
        if batch is None:
            argv = [*argv, "--batch_size", "auto"]  # sago's token budget, not lm-eval's default of 1
        else:
            check_batch_size(batch[1])
    return [
        (c, _set_option(argv, MODEL_ARGS, ",".join(a for a in (f"pretrained={c}", rest) if a)))
        for c in checkpoints_of(pretrained)
    ]


LIGHT_ARGS = {"device", "dtype", "batch_size", "cache_dir", "max_length", "add_bos_token", "prefix_token_id"}
LIGHT_ARGS |= {"sago_db", "token_budget"}  # model arguments that leave what is exported unchanged


def sago_model_args(argv: Sequence[str]) -> dict[str, str] | None:
    """The ``--model_args`` of a command line that runs the sago backend, ``pretrained`` aside, by name;
    None for another model or no model arguments."""
    model, model_args = _option(list(argv), "--model"), _option(list(argv), MODEL_ARGS)
    if model is None or model[1] not in MODEL_NAMES or model_args is None:
        return None
    return dict(a.split("=", 1) for a in split_model_args(model_args[1])[1].split(",") if "=" in a)


def start_light_if_cached(runs: Sequence[tuple[str, list[str]]]) -> bool:
    """Tokenizers without torch (:func:`sago_fast.runtime.light.start_without_torch_if_exported`: ~3 s of
    transformers' import) when every checkpoint of a ``sago lm-eval`` command runs the sago backend with
    its export already cached. Anything else (another model, an adapter's ``base=``, a dtype other than
    the device's default, a checkpoint that does not resolve): nothing is changed and the run reports as
    it would. Returns whether torch is left out of the tokenizers."""
    from sago_fast.checkpoints.resolve import resolve_checkpoint, resolve_each
    from sago_fast.lmeval.arguments import engine_device, sago_dtype
    from sago_fast.runtime.light import start_without_torch_if_exported
    from sago_fast.runtime.session import resolve_device
    from sago_fast.types import ExportSettings

    settings = set()
    for _, argv in runs:
        args, device = sago_model_args(argv), _option(argv, "--device")
        if args is None or not set(args) <= LIGHT_ARGS:
            return False
        try:
            resolved = resolve_device(engine_device(device[1] if device else "auto"))
            if sago_dtype(args.get("dtype")) not in (None, ExportSettings.for_device(resolved).dtype):
                return False
        except Exception:  # the run itself reports it, in lm-eval's flow
            return False
        settings.add((resolved, args.get("cache_dir")))
    if len(settings) != 1:
        return False
    names = [checkpoint for checkpoint, _ in runs]
    try:  # content-hashed here, on a few threads; the runs find the hashes remembered
        checkpoints = resolve_each(names, lambda i: resolve_checkpoint(names[i]))
    except Exception:
        return False
    device_of_all, cache_dir = settings.pop()
    return start_without_torch_if_exported(checkpoints, device_of_all, cache_dir)


def check_before_work(argv: Sequence[str]) -> None:
    """For the sago backend, before lm-eval is even imported: what the backend checks when lm-eval builds
    it (:func:`preflight`), so a bad cache, results file or batch size is one
    line at once rather than after lm-eval's start."""
    args = sago_model_args(argv)
    if args is None:
        return
    batch = _option(list(argv), "--batch_size")
    preflight(args.get("cache_dir"), args.get("sago_db"), batch[1] if batch else None)


def run_lmeval_cli(argv: Sequence[str]) -> None:
    """``lm_eval run ARGV`` in this process for each checkpoint ``--model_args pretrained=`` names, with
    the sago backend registered."""
    import sago_fast.lmeval  # noqa: F401  (registers "sago")

    try:
        from lm_eval._cli import HarnessCLI
    except ImportError:
        raise InputError("lm-eval is not installed: pip install 'sago_fast[lmeval]'") from None
    runs = [("", ["-h"])] if "-h" in argv else lmeval_argvs(argv)  # -h: lm-eval's own flags
    for _, args in runs[:1] if "-h" not in argv else ():
        check_before_work(args)
    if "-h" not in argv:
        start_light_if_cached(runs)
    with reused_per_command():
        for n, (checkpoint, args) in enumerate(runs, start=1):
            if len(runs) > 1:
                log.warning("checkpoint %d of %d: %s", n, len(runs), checkpoint)
            saved = sys.argv
            sys.argv = ["lm-eval", "run", *args]
            try:
                cli = HarnessCLI()
                cli.execute(cli.parse_args())
            except SagoError:
                raise
            except Exception as exc:  # lm-eval's own errors (a task it cannot load, ...): one line too
                first = (str(exc).splitlines() or [""])[0]
                raise InputError(f"lm-eval stopped on {checkpoint}: {type(exc).__name__}: {first}") from exc
            finally:
                sys.argv = saved


def evaluate_each(pretrained: str, model_args: str = "", **simple_evaluate: Any) -> dict[str, Any]:
    """``lm_eval.simple_evaluate(model="sago", ...)`` on each checkpoint ``pretrained`` names, in order;
    returns checkpoint path -> lm-eval's results. ``model_args``: the backend's other arguments
    (``device=cuda,dtype=float16``); ``simple_evaluate``: lm-eval's own (``tasks=[...]``, ``limit``...)."""
    import lm_eval

    import sago_fast.lmeval  # noqa: F401  (registers "sago")

    results: dict[str, Any] = {}
    checkpoints = checkpoints_of(pretrained)
    with reused_per_command():
        for checkpoint in checkpoints:
            args = ",".join(a for a in (f"pretrained={checkpoint}", model_args) if a)
            results[checkpoint] = lm_eval.simple_evaluate(model="sago", model_args=args, **simple_evaluate)
    return results
