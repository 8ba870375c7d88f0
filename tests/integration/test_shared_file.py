"""Many processes on one results file: readers wait for a writer's commit, units are claimed in the file,
dead claims are taken over, and two `sago run` processes on one model list give one run's tables."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from sago_fast.errors import InputError, StoreError
from sago_fast.run.claims import Claims, ClaimSettings, PlannedUnit, Worker
from sago_fast.store import Store
from sago_fast.store.liveness import utc_now
from sago_fast.store.shared import SharedFile
from sago_fast.store.status import run_status

HOLD = """
import duckdb, sys, time
con = duckdb.connect(sys.argv[1])
print("held", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
print("free", flush=True)
time.sleep(60)
"""


def _hold(db: Path, seconds: float) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_reader_waits_for_a_held_file_and_names_the_holder(tmp_path, caplog):
    db = tmp_path / "r.duckdb"
    with Store(db) as store:
        store.query("INSERT INTO runs (run_id, created_at, status) VALUES ('r1', now(), 'running')")
    holder = _hold(db, 1.5)
    try:
        with caplog.at_level(logging.WARNING, logger="sago_fast.store.locking"):
            with Store(db, read_only=True, wait=20) as store:
                _, rows = store.query("SELECT run_id FROM runs")
        assert rows == [("r1",)]
        said = " ".join(r.getMessage() for r in caplog.records)
        assert f"waiting for {db}: held by PID {holder.pid}" in said
    finally:
        holder.kill()
        holder.wait()


def test_a_file_that_stays_held_is_one_line_naming_the_process(tmp_path):
    db = tmp_path / "r.duckdb"
    Store(db).close()
    holder = _hold(db, 60)
    try:
        with pytest.raises(StoreError, match=rf"still held by PID {holder.pid} .* after waiting"):
            Store(db, read_only=True, wait=0.3)
        with pytest.raises(StoreError, match=rf"still held by PID {holder.pid}"):
            Store(db, wait=0.3)  # a writer too
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_holder_leaves_the_file_free(tmp_path):
    db = tmp_path / "r.duckdb"
    Store(db).close()
    holder = _hold(db, 60)
    holder.kill()
    holder.wait()
    with Store(db, wait=0) as store:  # no wait needed: the system dropped the dead process's lock
        assert store.schema_version() > 0


def test_bad_wait_setting_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("SAGO_DB_WAIT", "soon")
    with pytest.raises(StoreError, match=r"\$SAGO_DB_WAIT must be a number of seconds, not 'soon'"):
        Store(tmp_path / "r.duckdb")


UNITS = [PlannedUnit(f"u{i}", i, f"ckpt-{i // 2}", "capitals", 10) for i in range(4)]


@pytest.fixture(autouse=True)
def _files_let_go():
    """Every SharedFile a test opened is closed after it (each would hold its file until asked)."""
    opened: list[SharedFile] = []
    real = SharedFile.__init__

    def tracked(self, *args, **kwargs):
        real(self, *args, **kwargs)
        opened.append(self)

    SharedFile.__init__ = tracked  # type: ignore[method-assign]
    yield
    SharedFile.__init__ = real  # type: ignore[method-assign]
    for file in opened:
        file.close()


def test_a_writer_holds_its_file_until_another_process_asks(tmp_path, monkeypatch):
    """Between its steps a writer keeps the file open (no ~80 ms open and close per commit), and lets
    it go when a reader in another process asks (the idle bound is out of reach here)."""
    import sago_fast.store.shared as shared

    monkeypatch.setattr(shared, "IDLE_RELEASE_S", 1e6)
    db = tmp_path / "w.duckdb"
    writer = SharedFile(db)
    with writer.step() as store, store.transaction():
        store.query("INSERT INTO runs (run_id, created_at, status) VALUES ('r1', now(), 'running')")
    assert writer._store is not None  # held after the step
    code = (
        "import sys, time; from sago_fast.store import Store; t = time.monotonic(); "
        "s = Store(sys.argv[1], read_only=True, wait=20); print(s.query('SELECT count(*) FROM runs')[1][0][0], "
        "time.monotonic() - t)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    count, waited = out.stdout.split()
    assert count == "1"
    assert (
        float(waited) < 20
    )  # it asked and got in (without the request it would have waited 20 s and failed)
    with writer.step() as store:  # the writer opens it again for its next step
        assert store.query("SELECT count(*) FROM runs")[1][0][0] == 1


def _claims(db: Path, name: str, pid: int, stale_after_s: float = 120.0) -> Claims:
    worker = Worker(f"{os.uname().nodename}:{pid}:{name}", os.uname().nodename, pid, f"sago run ({name})")
    claims = Claims(
        SharedFile(db), "run-1", worker, ClaimSettings(heartbeat_s=60, stale_after_s=stale_after_s)
    )
    with claims.file.step() as store, store.transaction():
        claims.register(store, UNITS)
    return claims


def _dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def test_units_are_claimed_once_and_dead_claims_are_taken_over(tmp_path):
    db = tmp_path / "c.duckdb"
    mine = _claims(db, "a", os.getpid())
    dead = _claims(db, "b", _dead_pid())
    with mine.file.step() as store:
        assert mine.claim(store, "u0").mine
        assert dead.claim(store, "u1").mine  # its process is gone from now on
        held = dead.claim(store, "u0")
        assert held.state == "held" and held.holder == f"PID {os.getpid()} on {os.uname().nodename}"
        taken = mine.claim(store, "u1")
        assert (
            taken.mine
            and f"PID {dead.worker.pid}" in taken.took_over
            and "its process is gone" in taken.took_over
        )
        assert mine.held_elsewhere(store, ["u0", "u1"]) is False
        mine.release(store, "u0", "done")
        _, rows = store.query("SELECT unit_id, state, takeovers FROM run_units ORDER BY unit_id")
    assert rows == [("u0", "done", 0), ("u1", "claimed", 1), ("u2", "waiting", 0), ("u3", "waiting", 0)]


def test_a_claim_without_heartbeat_is_taken_over(tmp_path):
    db = tmp_path / "c.duckdb"
    slow = _claims(db, "slow", os.getpid(), stale_after_s=30)
    other = _claims(db, "other", os.getpid(), stale_after_s=30)
    with other.file.step() as store:
        assert slow.claim(store, "u2").mine
        assert other.claim(store, "u2").state == "held"
        assert other.held_elsewhere(store, ["u2", "u3"])
        store.query(
            "UPDATE workers SET heartbeat_at = $t WHERE worker_id = $w",
            {"t": utc_now() - timedelta(seconds=45), "w": slow.worker.worker_id},
        )
        taken = other.claim(store, "u2")
        assert taken.mine and "no heartbeat for 45 s" in taken.took_over
        assert store.mark_dead_runs(30) == []  # `other` still works on the run


def test_two_processes_on_one_model_list_share_the_run(tmp_path, checkpoints, cache_dir):
    """Started together, each unit is evaluated once (by one of them), `sago status` shows both, and
    the tables equal one process's run."""
    args = [
        "-m",
        str(checkpoints["llama"]),
        "-m",
        str(checkpoints["gpt2"]),
        "-d",
        "comparison",
        "--limit",
        "4",
    ]
    args += ["-k", "1", "--cache-dir", str(cache_dir)]

    def sago_run(db: Path) -> subprocess.Popen:
        command = [sys.executable, "-m", "sago_fast.cli.app", "run", *args, "--db", str(db)]
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    one = sago_run(tmp_path / "one.duckdb")
    assert one.wait(timeout=300) == 0, one.stderr.read() if one.stderr else ""
    shared = tmp_path / "shared.duckdb"
    procs = [sago_run(shared), sago_run(shared)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    with Store(shared, read_only=True) as store:
        _, units = store.query("SELECT unit_id, count(*) FROM units GROUP BY unit_id")
        _, chunks = store.query("SELECT count(*), count(DISTINCT (unit_id, chunk)) FROM unit_chunks")
    assert len(units) == 2 and all(n == 1 for _, n in units)
    assert chunks[0][0] == chunks[0][1]
    (status,) = run_status(shared)
    assert status.status == "done" and status.count("done") == 2
    assert len(status.workers) == 2 and all(w.state == "finished" for w in status.workers)

    query = "SELECT model_id, example_id, axis, metric, family, value FROM item_scores ORDER BY ALL"
    with Store(tmp_path / "one.duckdb", read_only=True) as a, Store(shared, read_only=True) as b:
        (_, rows_a), (_, rows_b) = a.query(query), b.query(query)
        (_, scores_a), (_, scores_b) = (
            s.query("SELECT model_id, metric, estimate FROM model_scores ORDER BY ALL") for s in (a, b)
        )
    assert len(rows_a) == len(rows_b) > 0
    for x, y in zip(rows_a + scores_a, rows_b + scores_b, strict=True):
        assert x[:-1] == y[:-1]
        assert (x[-1] is None and y[-1] is None) or abs(x[-1] - y[-1]) <= 1e-6


def test_a_read_only_results_file_is_one_line_before_work(tmp_path, checkpoints, monkeypatch):
    from sago_fast.run import RunConfig, run

    db = tmp_path / "ro.duckdb"
    Store(db).close()
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode, **k: False if Path(p) == db else real_access(p, mode, **k)
    )
    with pytest.raises(InputError, match=rf"--db {db}: the file is read-only"):
        run(
            RunConfig(models=(str(checkpoints["llama"]),), datasets=("comparison",), db=db, limit=2),
            progress=False,
        )


@pytest.mark.slow
def test_soak_writers_killed_at_random_and_a_reader(tmp_path):
    """`benchmarks/soak_shared_file.py`, shortened: 3 writers on one file, SIGKILLed at random for 60 s, a
    reader all along; every unit done once, no duplicate row, the tables of a clean run, no partial chunk."""
    script = Path(__file__).parents[2] / "benchmarks" / "soak_shared_file.py"
    command = [sys.executable, str(script), "--seconds", "60", "--limit", "30", "--workdir", str(tmp_path)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "every unit done once, no duplicate rows" in proc.stdout


def test_other_live_writers_of_this_machine_share_its_cores(tmp_path):
    """``sago run`` lets ONNX Runtime's threads sleep instead of spin when another live process of this
    machine writes the same file (of any run); a dead one, or one on another machine, does not count."""
    db = tmp_path / "c.duckdb"
    mine = _claims(db, "a", os.getpid())
    _claims(db, "b", _dead_pid())
    elsewhere = Worker("other-host:1:x", "other-host", 1, "sago run (elsewhere)")
    far = Claims(SharedFile(db), "run-2", elsewhere, ClaimSettings(heartbeat_s=60))
    with far.file.step() as store, store.transaction():
        far.register(store, UNITS)
    with mine.file.step() as store:
        assert mine.others_here(store) is False
    here = Worker(f"{os.uname().nodename}:{os.getpid()}:c", os.uname().nodename, os.getpid(), "sago run (c)")
    other_run = Claims(SharedFile(db), "run-2", here, ClaimSettings(heartbeat_s=60))
    with other_run.file.step() as store, store.transaction():
        other_run.register(store, UNITS)
    with mine.file.step() as store:
        assert mine.others_here(store) is True
        assert other_run.others_here(store) is True
