"""What the tests of work units share: comparing two results files table by table, running the CLI in a
child process, and killing it at a marker of its log."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import duckdb

TABLES = (
    "runs",
    "models",
    "datasets",
    "examples",
    "variants",
    "outputs",
    "item_scores",
    "layer_scores",
    "dataset_scores",
    "units",
    "model_scores",
    "model_comparisons",
    "rankings",
    "ranking_agreement",
    "rank_reversals",
    "axis_correlations",
)
VOLATILE = {
    "runs": "EXCLUDE (created_at, command, config_json, host, pid)",
    "units": "EXCLUDE (seconds, finished_at)",
}


def assert_same_tables(db_a: Path, db_b: Path) -> None:
    """Same rows in every table (multiset; NaN equals NaN in SQL set operations), timings aside."""
    con = duckdb.connect(str(db_a), read_only=True)
    con.execute(f"ATTACH '{db_b}' AS other (READ_ONLY)")
    for table in TABLES:
        columns = VOLATILE.get(table, "")
        a = f"SELECT * {columns} FROM main.{table}"
        b = f"SELECT * {columns} FROM other.{table}"
        n_a = con.execute(f"SELECT count(*) FROM ({a})").fetchone()[0]
        n_b = con.execute(f"SELECT count(*) FROM ({b})").fetchone()[0]
        only_a = con.execute(f"SELECT count(*) FROM ({a} EXCEPT ALL {b})").fetchone()[0]
        only_b = con.execute(f"SELECT count(*) FROM ({b} EXCEPT ALL {a})").fetchone()[0]
        assert (n_a, only_a, only_b) == (n_b, 0, 0), table
    con.close()


def sago_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "sago_fast.cli.app", *args]


def sigkill_at(command: list[str], marker: str, times: int = 1, env: dict[str, str] | None = None) -> None:
    """Run ``command`` (with ``env`` added to this environment) and SIGKILL it as soon as ``times`` lines of
    its stderr have held ``marker``."""
    proc = subprocess.Popen(
        command,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {}), "TQDM_DISABLE": "1"},
    )
    seen = 0
    for line in proc.stderr:  # type: ignore[union-attr]
        seen += marker in line
        if seen == times:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL


def unit_job(checkpoints, cache_dir, names: tuple[str, ...] = ("llama", "gpt2")) -> tuple[list[str], dict]:
    """The checkpoints ``names`` × two datasets, 4 examples: the CLI arguments and the config."""
    models = tuple(str(checkpoints[name]) for name in names)
    families = ("typo", "option_permutation", "pair_swap", "wrong_hint")
    args = [
        *(x for m in models for x in ("-m", m)),
        "-d",
        "comparison",
        "-d",
        "capitals",
        "--limit",
        "4",
        "-k",
        "1",
    ]
    args += ["--cache-dir", str(cache_dir), *(x for f in families for x in ("-F", f))]
    config = dict(
        models=models,
        datasets=("comparison", "capitals"),
        limit=4,
        variants_per_family=1,
        families=families,
        cache_dir=cache_dir,
    )
    return args, config
