"""The GPU check's logic, run here as its dry run (`benchmarks/gpu_check.sh OUT --dry-run`): a tiny model on
the CPU through every phase, parity against HF and the canonical log-likelihoods against the HF pass."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ITEMS = [
    ("What is the capital of France?", "Berlin", "Paris", "Madrid", "Rome", "B"),
    ("Which gas do plants take in?", "Oxygen", "Carbon dioxide", "Helium", "Neon", "B"),
    ("How many sides has a triangle?", "Two", "Three", "Four", "Five", "B"),
    ("Which number is prime?", "4", "6", "7", "9", "C"),
    ("What does a thermometer measure?", "Mass", "Time", "Temperature", "Length", "C"),
    ("Which planet is largest?", "Mars", "Earth", "Venus", "Jupiter", "D"),
]


def test_the_dry_run_passes_every_phase(tmp_path):
    mmlu = tmp_path / "mmlu"
    mmlu.mkdir()
    for name, rows in (("geography_test.csv", ITEMS[:3]), ("science_test.csv", ITEMS[3:])):
        with (mmlu / name).open("w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows(rows)
    out = tmp_path / "out"
    done = subprocess.run(
        [
            "bash",
            str(ROOT / "benchmarks" / "gpu_check.sh"),
            str(out),
            "--dry-run",
            "--mmlu",
            str(mmlu),
            "--work",
            str(tmp_path / "work"),
        ],
        env={**os.environ, "PYTHON": sys.executable, "SAGO_CACHE_DIR": str(tmp_path / "cache")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    phases = report["phases"]
    assert report["ok"] and set(phases) == {"environment", "parity", "probe", "job"}
    assert all(check["within"] and check["generation_equal"] for check in phases["parity"]["checks"])
    assert {row["batch"] for row in phases["probe"]["grid"]} == {1, 4}
    job = phases["job"]
    assert job["items"] == 6 and job["renderings"] > 6 * 4  # every family, k = 1
    assert job["canonical_loglik_max_abs_diff"] < 1e-4 and job["canonical_answers_equal"]
    assert "phases: environment ok, parity ok, probe ok, job ok" in (out / "gpu_check.txt").read_text()
