"""The sampled design replayed from a full-design run, without the model: bias, coverage and efficiency.

    python benchmarks/bench_design.py --db FULL.duckdb [--m 1 2 3 4 6] [--assignments 1000] [--markdown]

FULL.duckdb holds a full-design run (every family of every item; e.g. SmolLM2 on real MMLU items:
``sago run -m SmolLM2.gguf -d mmlu:FOLDER -k 1 --db FULL.duckdb``). For each m, every assignment draws the
cells with the package's own draw (one seed per assignment) and scores the kept variants with the axes' own
scorers (:mod:`sago_fast.stats.replay`). Per replayed metric it prints:

- ``full``: the full design's value on these items; ``mean``: the mean estimate over assignments, and
  ``bias/MC``: their difference in Monte Carlo standard errors (|z| < 3 is no detectable bias);
- ``cover``: the share of assignments whose 95% interval covers the full value, and ``cs cover`` the share
  whose anytime-valid confidence sequence (as ``--precision`` builds it, a look every 10 items in the
  visiting order) covers it at every look (followed metrics only);
- ``hw/full``: the mean 95% half-width against the full design's on the same items; ``tokens``: the prompt
  tokens of the cells (replicate pass included) against the full design's; ``equal-precision cost``:
  tokens x (hw/full)^2, what the sampled design costs to reach the full design's precision (below 1: it
  is cheaper per unit of precision).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import date
from pathlib import Path

import numpy as np

from sago_fast.stats.replay import REPLAYED, assignment_values, full_figures, replay_assignment, stored_items
from sago_fast.stats.settings import StatsConfig
from sago_fast.store import Store
from sago_fast.units.sequential import metric_sequence

FOLLOWED = ("flip_rate", "correctness_flip", "option_js")  # bounded metrics --precision follows
LOOK = 10  # items between two looks of the confidence sequence


def sequence_covers(values: np.ndarray, truth: float, metric: str) -> bool:
    """Whether the confidence sequence over ``values`` (visiting order) covers ``truth`` at every look."""
    scale, sequence = metric_sequence(metric, 0.05, 0.05, len(values))
    for start in range(0, len(values), LOOK):
        sequence.extend(scale.to_unit(values[start : start + LOOK]))
        low, high = (scale.from_unit(b) for b in sequence.bounds())
        if not low - 1e-12 <= truth <= high + 1e-12:
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="results file with a full-design run")
    parser.add_argument("--m", type=int, nargs="+", default=[1, 2, 3, 4, 6])
    parser.add_argument("--assignments", type=int, default=1000)
    parser.add_argument("--resamples", type=int, default=500, help="bootstrap resamples per interval")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()

    config = StatsConfig(n_resamples=args.resamples, seed=0)
    with Store(args.db, read_only=True) as store:
        _, units = store.query("SELECT run_id, model_id, dataset_id FROM units ORDER BY finished_at LIMIT 1")
        run_id, model_id, dataset_id = units[0]
        items = stored_items(store, run_id, model_id, dataset_id)
    full = full_figures(items, config)
    started = time.perf_counter()
    rows = []
    for m in args.m:
        cache: dict = {}  # item scores by (item, drawn families): at most C(K, m) per item
        replays = [replay_assignment(items, m, seed, config, cache) for seed in range(args.assignments)]
        tokens = np.mean([r.tokens for r in replays]) / full.tokens
        for key in REPLAYED:
            if key not in full.estimates:
                continue
            value, low, high = full.estimates[key]
            got = np.array([r.estimates[key] for r in replays if key in r.estimates])  # (R, 3)
            mc = got[:, 0].std(ddof=1) / np.sqrt(len(got))
            hw = np.mean((got[:, 2] - got[:, 1]) / 2) / ((high - low) / 2)
            row = {
                "m": m,
                "metric": key[0] if key[1] is None else f"{key[0]} ({key[1]})",
                "full": value,
                "mean": float(got[:, 0].mean()),
                "bias_mc": float((got[:, 0].mean() - value) / mc) if mc > 0 else 0.0,
                "cover": float(np.mean((got[:, 1] <= value + 1e-12) & (value - 1e-12 <= got[:, 2]))),
                "hw_ratio": float(hw),
                "tokens": float(tokens),
                "equal_precision_cost": float(tokens * hw**2),
            }
            if key[0] in FOLLOWED and key[1] is None:
                covered = [
                    sequence_covers(_visited(items, m, seed, key, cache), value, key[0])
                    for seed in range(100)
                ]
                row["cs_cover"] = float(np.mean(covered))
            rows.append(row)
    seconds = time.perf_counter() - started
    header = (
        f"{len(items)} items of {dataset_id}, {args.assignments} assignments per m, {date.today()}, "
        f"{platform.processor() or platform.machine()}, {seconds:.0f} s"
    )
    print(header)
    columns = (
        "m",
        "metric",
        "full",
        "mean",
        "bias_mc",
        "cover",
        "cs_cover",
        "hw_ratio",
        "tokens",
        "equal_precision_cost",
    )
    if args.markdown:
        print("| " + " | ".join(columns) + " |")
        print("|" + " --- |" * len(columns))
    for row in rows:
        cells = [_cell(row.get(c)) for c in columns]
        print(("| " + " | ".join(cells) + " |") if args.markdown else "  ".join(f"{c:>12}" for c in cells))
    if args.json:
        args.json.write_text(json.dumps({"header": header, "rows": rows}, indent=1))


def _visited(items, m: int, seed: int, key, cache: dict) -> np.ndarray:
    """One assignment's item values of ``key`` in its visiting order (the order a sequential unit uses)."""
    from sago_fast.variants.design import visiting_rank

    values, _ = assignment_values(items, m, seed, cache)
    ranked = sorted(
        zip(items, values, strict=True), key=lambda pair: visiting_rank(seed, pair[0].outputs.example_id)
    )
    found = [v[key] for _, v in ranked if key in v]
    return np.array([x for x in found if np.isfinite(x)])


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


if __name__ == "__main__":
    main()
