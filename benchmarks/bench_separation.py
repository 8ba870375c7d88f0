"""Stopping when a comparison is settled: `--until-separated` against the full runs, on the real model.

Compares two quantisations of the real SmolLM2-135M-Instruct: the shipped Q4_1 GGUF and a Q8_0 made from it
(``tests/quantize.py``: the same weights to within Q8_0's rounding, so every difference should be small), on
N MMLU-like 4-option items of 20-word questions, families ``typo`` and ``option_permutation``, k = 1, chunks of
32 MB:
  separated : `sago run -m Q4_1 -m Q8_0 --until-separated --precision H` (the models in lockstep, both
              stopping once every followed difference has a known sign or a half-width within H)
  full      : the same two models without it, on every item
and prints the examples the separated run used, each comparison's final paired sequence beside the full
runs' paired difference (inside?), and the wall times side by side.

    python benchmarks/bench_separation.py --items 300 --precision 0.05
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from bench_memory import mmlu_like
from bench_sequential import command
from real_model import offline_workdir, smollm2_gguf, timed

from tests.quantize import requantize

FULL_MEANS = """
SELECT o.model_id, 'accuracy' AS metric, avg(o.correct::DOUBLE) FROM outputs o JOIN variants v
  USING (dataset_id, variant_id) WHERE v.is_canonical AND o.replicate = 0 GROUP BY 1
UNION ALL
SELECT model_id, metric, avg(value) FROM item_scores
WHERE (metric IN ('flip_rate', 'answer_disagreement', 'dispersion_raw', 'option_js') AND family IS NULL)
   OR (metric = 'position_mirroring' AND family = 'option_permutation')
GROUP BY 1, 2
"""
FINAL = """
SELECT metric, n_examples, difference, lower, upper, sign, settled FROM comparison_sequences
QUALIFY row_number() OVER (PARTITION BY metric ORDER BY n_examples DESC) = 1 ORDER BY metric
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--precision", type=float, default=0.05)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "sago-bench-separation")
    args = parser.parse_args()
    from sago_fast.store import Store

    work = args.workdir
    env = offline_workdir(work)
    q4 = smollm2_gguf()
    q8 = work / "SmolLM2-135M-Instruct.Q8_0.gguf"
    if not q8.exists():
        requantize(q4, q8, "Q8_0")
    models = [q4, q8]
    cache = work / "exports"
    data = mmlu_like(work / f"mmlu-short-{args.items}.csv", args.items, question_words=20)
    timed(command(models, data, work / "warm.duckdb", cache, ["--limit", "2"]), env)  # export once
    sep_db, full_db = work / "separated.duckdb", work / "full.duckdb"
    for db in (sep_db, full_db):
        if db.exists():
            db.unlink()
    extra = ["--precision", str(args.precision), "--until-separated"]
    sep_s = timed(command(models, data, sep_db, cache, extra), env)
    full_s = timed(command(models, data, full_db, cache, []), env)
    with Store(sep_db, read_only=True) as store:
        _, units = store.query("SELECT model_id, stop_reason, n_examples, examples_available FROM units")
        _, final = store.query(FINAL)
        (model_a, model_b), *_ = store.query(
            "SELECT any_value(model_a), any_value(model_b) FROM comparison_sequences"
        )[1]
    with Store(full_db, read_only=True) as store:
        means: dict[tuple[str, str], float] = {(m, k): v for m, k, v in store.query(FULL_MEANS)[1]}
    _, _, used, available = units[0]
    print(
        f"SmolLM2-135M-Instruct Q4_1 vs a Q8_0 made from it, CPU ({os.cpu_count()} cores), {available} MMLU-like "
        f"items, families typo + option_permutation, k=1, --until-separated --precision {args.precision}"
    )
    print(
        f"  separated run: both units stopped ({', '.join(sorted({u[1] for u in units}))}) after "
        f"{used} of {available} examples ({used / available:.0%}), {sep_s:.0f} s; the two full runs "
        f"{full_s:.0f} s (ratio {sep_s / full_s:.2f})"
    )
    print("  final paired sequences (Q8_0 - Q4_1) and the full runs' difference (inside?):")
    for metric, n, difference, lower, upper, sign, settled in final:
        a, b = means.get((model_a, metric)), means.get((model_b, metric))
        truth = None if a is None or b is None else b - a
        inside = "n/a" if truth is None else ("yes" if lower <= truth <= upper else "NO")
        shown = "n/a" if truth is None else f"{truth:+.4f}"
        verdict = "sign known" if sign else "within H" if settled else "open"
        print(
            f"    {metric:20s} n={n} {difference:+.4f} in [{lower:+.4f}, {upper:+.4f}] ({verdict}); "
            f"full runs {shown}: {inside}"
        )


if __name__ == "__main__":
    main()
