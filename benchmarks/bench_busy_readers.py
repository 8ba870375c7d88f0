"""Readers of a large results file while a run writes it, on a busy machine: their latency, and how true
``sago status``'s time left is.

While ``sago run`` (SmolLM2-135M on ``--items`` real MMLU items) appends a run to ``--db`` (for the figures
in the README: the 100-checkpoint file ``bench_scale.py`` writes), this process runs the readers a user
runs, one after another, as child processes: ``sago status``, ``sago query`` (a count over ``outputs``)
and ``sago stats`` of the running run (the chunks committed so far). Each reader's wall time is recorded;
the table gives the median, p95 and the worst per reader (target: p95 <= 5 s). Every ``sago status``
that states a time left is compared with the time the run then really took to finish (target: within a
factor of 2 after the first chunk, or it says it does not know yet).

    python benchmarks/bench_busy_readers.py --db /tmp/sago-scale/scale.duckdb --items 150 [--markdown]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from real_model import mmlu_sample, smollm2_gguf

log = logging.getLogger("bench_busy_readers")
SAGO = [sys.executable, "-m", "sago_fast.cli.app"]
STATED = re.compile(r"about ([\d.]+) (s|min|h) left")


@dataclass
class Reading:
    reader: str
    started_s: float  # since the run started
    seconds: float
    ok: bool
    time_left_s: float | None = None  # sago status: the time left it stated
    note: str = ""


@dataclass
class Busy:
    items: int
    run_seconds: float
    readings: list[Reading] = field(default_factory=list)


def _stated_left(text: str) -> float | None:
    """The time left ``sago status`` states (``about 40 s left``, ``about 3 min left``, ``about 1.5 h
    left``: ``sago_fast.cli.files._duration``), in seconds, or None."""
    found = STATED.search(text)
    if found is None:
        return None
    return float(found.group(1)) * {"s": 1, "min": 60, "h": 3600}[found.group(2)]


def _newest_run(db: Path, env: dict[str, str]) -> str | None:
    done = subprocess.run(
        [*SAGO, "query", "--db", str(db), "--format", "json",
         "SELECT run_id FROM runs WHERE status = 'running' ORDER BY created_at DESC LIMIT 1"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return None
    rows = json.loads(done.stdout or "[]")
    return rows[0]["run_id"] if rows else None


def measure(db: Path, items: int, work: Path) -> Busy:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    data = mmlu_sample(work / f"mmlu{items}", items, seed=2)
    command = [*SAGO, "run", "-m", str(smollm2_gguf()), "-d", f"mmlu:{data}", "--db", str(db)]
    started = time.perf_counter()
    run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    busy = Busy(items, 0.0)
    run_id = None
    readers = ["sago status", "sago query", "sago stats"]
    turn = 0
    while run.poll() is None:
        reader = readers[turn % len(readers)]
        turn += 1
        if reader == "sago stats":
            run_id = run_id or _newest_run(db, env)
            if run_id is None:
                continue
            args = ["stats", "--db", str(db), "--run", run_id]
        elif reader == "sago status":
            args = ["status", "--db", str(db)]
        else:
            args = ["query", "--db", str(db), "SELECT count(*) AS outputs FROM outputs"]
        at = time.perf_counter() - started
        done = subprocess.run([*SAGO, *args], capture_output=True, text=True, env=env, check=False)
        reading = Reading(reader, at, time.perf_counter() - started - at, done.returncode == 0)
        if reader == "sago status":
            reading.time_left_s = _stated_left(done.stdout)
            reading.note = next((ln.strip() for ln in done.stdout.splitlines() if "examples:" in ln), "")
        if done.returncode != 0:
            reading.note = (done.stderr.strip().splitlines() or [""])[-1]
        busy.readings.append(reading)
        log.info("%s at %.0f s: %.1f s %s", reader, at, reading.seconds, reading.note)
    busy.run_seconds = time.perf_counter() - started
    if run.returncode != 0:
        raise SystemExit(f"the run failed: {run.stderr.read()[-2000:] if run.stderr else ''}")
    return busy


def markdown(busy: Busy) -> str:
    lines = [
        f"`sago run` of SmolLM2 on {busy.items} MMLU items took {busy.run_seconds:.0f} s; readers meanwhile:",
        "",
        "| reader | calls | median | p95 | worst | failed |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for reader in ("sago status", "sago query", "sago stats"):
        seconds = [r.seconds for r in busy.readings if r.reader == reader]
        failed = sum(not r.ok for r in busy.readings if r.reader == reader)
        if seconds:
            lines.append(
                f"| `{reader}` | {len(seconds)} | {np.median(seconds):.1f} s | "
                f"{np.percentile(seconds, 95):.1f} s | {max(seconds):.1f} s | {failed} |"
            )
    stated = [r for r in busy.readings if r.time_left_s is not None]
    if stated:
        ratios = [(busy.run_seconds - r.started_s - r.seconds) / max(r.time_left_s, 1.0) for r in stated]
        lines += [
            "",
            f"time left stated {len(stated)} times: true / stated from {min(ratios):.2f} to {max(ratios):.2f} "
            "(target: within 0.5-2)",
        ]
    unknown = sum(1 for r in busy.readings if r.reader == "sago status" and r.time_left_s is None)
    lines.append(f"`sago status` without a time left (not known yet, or the run ending): {unknown}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", type=Path, required=True, help="the results file the run appends to")
    parser.add_argument("--items", type=int, default=150)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sago-busy")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args.work.mkdir(parents=True, exist_ok=True)
    busy = measure(args.db, args.items, args.work)
    if args.markdown:
        print(markdown(busy))
    if args.json:
        args.json.write_text(json.dumps(asdict(busy), indent=1))


if __name__ == "__main__":
    main()
