"""Work units: resume after SIGKILL, Parquet shards + merge, the Ray executor, checkpoint lists, skipping."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest

from sago_fast.checkpoints.entries import expand_models
from sago_fast.errors import InputError
from sago_fast.run import RunConfig, run
from sago_fast.run.merge import merge_shards
from sago_fast.run.plan import plan_run
from tests.units_support import assert_same_tables, sago_cmd, sigkill_at, unit_job

pytestmark = pytest.mark.xdist_group("units")  # module fixtures: built once, in one process


@pytest.fixture(scope="module")
def job(checkpoints, cache_dir):
    return unit_job(checkpoints, cache_dir)


@pytest.fixture(scope="module")
def reference(job, tmp_path_factory):
    """The uninterrupted run."""
    _, config = job
    db = tmp_path_factory.mktemp("reference") / "ref.duckdb"
    result = run(RunConfig(db=db, **config), progress=False)
    assert len(result.units) == 4
    return db, result


def test_sigkill_then_rerun_equals_an_uninterrupted_run(job, reference, tmp_path):
    args, _ = job
    db = tmp_path / "killed.duckdb"
    sigkill_at(sago_cmd("-v", "run", *args, "--db", str(db)), " done in ")  # the first unit is committed
    con = duckdb.connect(str(db), read_only=True)
    done = con.execute("SELECT count(*) FROM units").fetchone()[0]
    con.close()
    assert 1 <= done < 4  # killed in the middle
    from sago_fast.store import Store
    from sago_fast.store.status import run_status

    (killed,) = run_status(db)  # status says what happened without waiting for the next run or stats
    assert killed.status == "interrupted (its process is gone)" and killed.eta_s is None
    shown = subprocess.run(sago_cmd("status", "--db", str(db)), capture_output=True, text=True)
    assert shown.returncode == 0 and "interrupted (its process is gone)" in shown.stdout

    with Store(db) as store:  # the dead process's run is found and marked for what it is
        assert store.query("SELECT status FROM runs")[1] == [("running",)]
        assert len(store.mark_dead_runs()) == 1
        assert store.query("SELECT status FROM runs")[1] == [("interrupted",)]
    again = subprocess.run(
        sago_cmd("run", *args, "--db", str(db)), capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stderr
    left = 4 - done
    assert (
        "already done (skipped)" in again.stdout
        and f"{left} unit{'s' if left > 1 else ''} run" in again.stdout
    )
    assert_same_tables(db, reference[0])
    with Store(db, read_only=True) as store:
        assert store.query("SELECT status FROM runs")[1] == [("done",)]


def test_rerun_skips_done_units_without_loading_models(job, reference, tmp_path, monkeypatch):
    _, config = job
    db = tmp_path / "copy.duckdb"
    shutil.copy(reference[0], db)
    import sago_fast

    monkeypatch.setattr(sago_fast, "load_model", lambda *a, **k: pytest.fail("a done unit loaded its model"))
    result = run(RunConfig(db=db, **config), progress=False)
    assert result.skipped == 4 and result.units == () and result.run_id == reference[1].run_id
    assert_same_tables(db, reference[0])
    # a changed setting makes new units in a new run
    changed = plan_run(RunConfig(db=db, **{**config, "seed": 1}))
    assert changed.run_id != result.run_id
    assert not {u.unit_id for u in changed.units} & {
        u.unit_id for u in plan_run(RunConfig(db=db, **config)).units
    }


def test_two_shards_merged_equal_the_unsharded_run(job, reference, tmp_path):
    _, config = job
    shards = tmp_path / "shards"
    for i in range(2):
        result = run(RunConfig(shard=f"{i}/2", shard_dir=shards, **config), progress=False)
        assert len(result.units) == 2 and result.db_path is None
    with pytest.raises(InputError, match=r"--shard writes Parquet unit folders to --shard-dir, not to --db"):
        RunConfig(shard="0/2", shard_dir=shards, db=tmp_path / "x.duckdb", **config)
    merged = tmp_path / "merged.duckdb"
    first = subprocess.run(
        sago_cmd("merge", str(shards), "--db", str(merged)), capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    assert "merged 4 units" in first.stdout
    assert_same_tables(merged, reference[0])
    # merging again changes nothing
    again = merge_shards([shards], merged)
    assert again.merged == [] and len(again.already) == 4
    assert_same_tables(merged, reference[0])
    from sago_fast.store.status import run_status

    (status,) = run_status(merged)  # the merged file's plan and units, as `sago status` shows them
    assert status.status == "done" and status.count("done") == 4 and len(status.units) == 4
    assert status.examples_done == status.examples_planned == 16
    shown = subprocess.run(sago_cmd("status", "--db", str(merged)), capture_output=True, text=True)
    assert "units: 4 (4 done)" in shown.stdout and "16 of at most 16 done" in shown.stdout
    half = tmp_path / "half.duckdb"  # one shard of two: the other's units are planned, not merged
    merge_shards([shards / result.run_id / u for u in sorted(os.listdir(shards / result.run_id))[:1]], half)
    (part,) = run_status(half)
    assert part.status == "partial" and (part.count("done"), part.count("not merged")) == (1, 3)
    assert {u.checkpoint for u in part.units} == set(config["models"])


def test_a_truncated_shard_is_reported_and_skipped(job, tmp_path):
    _, config = job
    shards = tmp_path / "shards"
    run(RunConfig(shard="0/2", shard_dir=shards, **config), progress=False)
    unit_dirs = sorted(p.parent for p in shards.rglob("manifest.json"))
    assert len(unit_dirs) == 2
    broken = unit_dirs[0] / "outputs.parquet"
    broken.write_bytes(broken.read_bytes()[: broken.stat().st_size // 2])
    db = tmp_path / "m.duckdb"
    proc = subprocess.run(sago_cmd("merge", str(shards), "--db", str(db)), capture_output=True, text=True)
    assert proc.returncode == 2
    assert (
        "damaged or incomplete and skipped" in proc.stderr and "outputs.parquet is unreadable" in proc.stderr
    )
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM units").fetchone()[0] == 1  # the intact unit only
    assert con.execute("SELECT count(DISTINCT dataset_id) FROM outputs").fetchone()[0] == 1
    con.close()


def test_ray_executor_gives_the_same_tables(job, reference, tmp_path):
    ray = pytest.importorskip("ray")
    _, config = job
    db = tmp_path / "ray.duckdb"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        result = run(RunConfig(db=db, executor="ray", **config), progress=False)
    finally:
        ray.shutdown()
    assert len(result.units) == 4
    assert_same_tables(db, reference[0])


def test_checkpoint_lists(tmp_path, checkpoints):
    root = tmp_path / "ckpts"
    for step in (150, 1200, 500):
        shutil.copytree(checkpoints["llama"], root / f"step-{step}")
    (root / "notes.txt").write_text("# two of them\nstep-1200\nstep-150\n")
    (root / "suite.yaml").write_text("models: [step-500, step-150]\n")
    assert [Path(p).name for p in expand_models([str(root / "step-*")])] == [
        "step-150",
        "step-500",
        "step-1200",
    ]
    assert [Path(p).name for p in expand_models([f"@{root / 'notes.txt'}"])] == ["step-1200", "step-150"]
    assert [Path(p).name for p in expand_models([str(root / "suite.yaml")])] == ["step-500", "step-150"]
    with pytest.raises(InputError, match="matches no checkpoint"):
        expand_models([str(root / "nothing-*")])
    # three copies of one checkpoint are one unit per dataset (evaluated and exported once)
    plan = plan_run(
        RunConfig(models=(str(root / "step-*"),), datasets=("comparison",), db=tmp_path / "x.duckdb", limit=2)
    )
    assert len(plan.units) == 1


def test_failed_units_do_not_stop_the_others(tmp_path, checkpoints, cache_dir, unexportable_checkpoint):
    from sago_fast.run.pipeline import UnitsFailedError

    db = tmp_path / "r.duckdb"
    config = RunConfig(
        models=(str(unexportable_checkpoint), str(checkpoints["llama"])),
        datasets=("comparison",),
        db=db,
        limit=3,
        variants_per_family=1,
        cache_dir=cache_dir,
    )
    with pytest.raises(UnitsFailedError, match=r"1 of 2 units failed .*ExportError"):
        run(config, progress=False)
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT status FROM runs").fetchall() == [("failed",)]
    assert con.execute("SELECT count(*) FROM units WHERE status = 'done'").fetchone()[0] == 1
    con.close()
