"""Faults end in one line: a full disk while a unit commits, Ctrl-C during a unit, sago bench errors."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time

import pytest

import sago_fast.run.sinks as sinks
from sago_fast.errors import DiskFullError
from sago_fast.run import RunConfig, run
from sago_fast.store import Store
from tests.integration.test_errors_first import default_sigint


def config(db, checkpoints, cache_dir):
    return RunConfig(
        models=(str(checkpoints["llama"]), str(checkpoints["qwen2"])),
        datasets=("capitals",),
        db=db,
        families=("typo",),
        variants_per_family=1,
        limit=3,
        cache_dir=cache_dir,
        stats=False,
    )


def test_disk_full_is_one_line_rolls_back_and_a_rerun_finishes(tmp_path, checkpoints, cache_dir, monkeypatch):
    db = tmp_path / "r.duckdb"
    real = sinks.write_chunk
    calls = []

    def full_on_second(store, run_id, unit_id, chunk, rows):
        calls.append(unit_id)
        if len(calls) == 2:
            with store.transaction():  # half the chunk goes in, then the disk is full
                store.insert("outputs", rows["outputs"])
                raise OSError(errno.ENOSPC, "No space left on device")
        return real(store, run_id, unit_id, chunk, rows)

    monkeypatch.setattr(sinks, "write_chunk", full_on_second)
    with pytest.raises(DiskFullError, match="the disk is full") as info:
        run(config(db, checkpoints, cache_dir), progress=False)
    assert "\n" not in str(info.value) and "run the same command again" in str(info.value)
    with Store(db, read_only=True) as store:
        assert store.query("SELECT count(*) FROM units")[1] == [(1,)]
        assert store.query("SELECT count(DISTINCT model_id) FROM outputs")[1] == [(1,)]  # rolled back
    monkeypatch.setattr(sinks, "write_chunk", real)
    result = run(config(db, checkpoints, cache_dir), progress=False)
    assert (len(result.units), result.skipped) == (1, 1)
    with Store(db, read_only=True) as store:
        (dups,) = store.query(
            "SELECT count(*) FROM (SELECT model_id, variant_id, replicate FROM outputs GROUP BY ALL HAVING count(*) > 1)"
        )[1]
        assert dups == (0,) and store.query("SELECT count(*) FROM units")[1] == [(2,)]


def test_ctrl_c_during_a_run_is_one_line(tmp_path, checkpoints, cache_dir):
    db = tmp_path / "r.duckdb"
    env = {**os.environ, "SAGO_CACHE_DIR": str(tmp_path / "cache")}
    command = [
        sys.executable,
        "-m",
        "sago_fast.cli.app",
        "run",
        "-m",
        str(checkpoints["gpt2"]),
        "-d",
        "letters",
        "--limit",
        "240",
        "--db",
        str(db),
        "--cache-dir",
        str(cache_dir),
        "--no-stats",
        "--max-new-tokens",
        "32",
    ]
    process = subprocess.Popen(
        command, env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=default_sigint
    )
    deadline = time.monotonic() + 120
    while not db.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)  # the database is created once the run is planned, before the unit starts
    time.sleep(3)  # inside the unit (240 examples x 13 variants of greedy decoding take far longer)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    lines = [line for line in stderr.splitlines() if line.startswith("sago:")]
    assert process.returncode == 130, stderr[-2000:]
    assert (
        lines and "interrupted" in lines[-1] and "run the same command again to resume" in lines[-1].lower()
    )
    assert "Traceback" not in stderr


def test_ctrl_c_while_a_library_initialises_stops_the_run(tmp_path, checkpoints, cache_dir, monkeypatch):
    """pybind11 wraps a SIGINT during module initialisation into ImportError; the run must still stop."""
    import sago_fast.units.driver as driver
    from sago_fast.errors import Interrupted

    def interrupted_import(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise ImportError("initialization failed") from exc

    monkeypatch.setattr(driver, "answer_chunk", interrupted_import)
    with pytest.raises(Interrupted, match="Run the same command again to resume"):
        run(config(tmp_path / "r.duckdb", checkpoints, cache_dir), progress=False)
    with Store(tmp_path / "r.duckdb", read_only=True) as store:
        assert store.query("SELECT count(*) FROM units")[1] == [(0,)]


def test_bench_errors_are_one_line(tmp_path, checkpoints):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "sago_fast.cli.app",
            "bench",
            "-m",
            str(checkpoints["llama"]),
            "--json",
            str(tmp_path / "b.json"),
            "--seq-lens",
            "100000",
            "--repeats",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("sago: error: sago bench:")
