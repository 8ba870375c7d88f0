"""Ray on a cluster that loses things: Ray's own multi-node simulation on one machine
(``ray.cluster_utils.Cluster``: a head that runs no task and worker nodes of one CPU each), and a job array
task killed and rerun. One checkpoint × two datasets: one Ray task.

- the worker node running the task removed (then a second node joins): Ray retries the task there, the
  run finishes, and its tables equal a clean run's (the same rows, no duplicate);
- the driver SIGKILLed after its first unit, then the same command again: it resumes, and the tables equal
  a clean run's;
- a checkpoint that cannot load fails its own units, in one line naming it, and the other checkpoint's
  units finish;
- a ``--shard`` task SIGKILLed and rerun, then merged (twice): the tables equal one unsharded run's.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sago_fast.run import RunConfig, run
from sago_fast.run.merge import merge_shards
from sago_fast.run.pipeline import UnitsFailedError
from tests.units_support import assert_same_tables, sago_cmd, sigkill_at, unit_job

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.xdist_group("ray_cluster")  # one cluster, built once, in one process

log = logging.getLogger(__name__)


@pytest.fixture(scope="module")
def job(checkpoints, cache_dir):
    """One checkpoint × two datasets (the CLI arguments and the config)."""
    return unit_job(checkpoints, cache_dir, ("llama",))


@pytest.fixture(scope="module")
def reference(job, tmp_path_factory):
    """The same run in this process, nothing lost (its exports fill the cache the cluster's tasks read)."""
    _, config = job
    db = tmp_path_factory.mktemp("reference") / "ref.duckdb"
    assert len(run(RunConfig(db=db, **config), progress=False).units) == 2
    return db


@pytest.fixture(scope="module")
def cluster():
    """A head node that runs no task and one worker node of one CPU."""
    simulated = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    simulated.add_node(num_cpus=1)
    simulated.wait_for_nodes()
    yield simulated
    simulated.shutdown()


def wait_until_the_task_runs(timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("CPU", 0.0) > 0.0:
        assert time.monotonic() < deadline, "the checkpoint's task never started"
        time.sleep(0.1)


def timed_run(config: dict, db: Path) -> float:
    started = time.monotonic()
    result = run(RunConfig(db=db, executor="ray", **config), progress=False)
    assert len(result.units) == 2 and not result.failed
    return time.monotonic() - started


def test_a_lost_worker_node_is_retried_and_the_tables_equal_a_clean_run(cluster, job, reference, tmp_path):
    _, config = job
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        clean_s = timed_run(config, tmp_path / "clean.duckdb")
        assert_same_tables(tmp_path / "clean.duckdb", reference)

        outcome: dict[str, object] = {}

        def drive() -> None:
            try:
                outcome["seconds"] = timed_run(config, tmp_path / "lost.duckdb")
            except BaseException as exc:  # handed to the test's thread
                outcome["error"] = exc

        deadline = time.monotonic() + 60  # the clean run's CPU given back, as Ray's resource view says
        while ray.available_resources().get("CPU", 0.0) < 1.0 and time.monotonic() < deadline:
            time.sleep(0.1)
        driver = threading.Thread(target=drive)
        driver.start()
        wait_until_the_task_runs()
        (running,) = (n for n in cluster.list_all_nodes() if not n.head)
        # within 0.1 s of the task getting its CPU, before its worker has even imported sago_fast: the
        # task cannot have finished, so what finishes is the retry
        cluster.remove_node(running, allow_graceful=False)  # its raylet and the task's worker die
        cluster.add_node(num_cpus=1)  # where the retry can go
        driver.join(timeout=600)
        assert not driver.is_alive() and "error" not in outcome, outcome.get("error")
        assert_same_tables(tmp_path / "lost.duckdb", reference)  # every row once: nothing lost, none twice
        log.info("Ray cluster: clean run %.1f s, with a worker node lost %.1f s", clean_s, outcome["seconds"])
    finally:
        ray.shutdown()


def test_a_killed_driver_resumes_and_the_tables_equal_a_clean_run(cluster, job, reference, tmp_path):
    args, _ = job
    db = tmp_path / "driver.duckdb"
    command = sago_cmd("-v", "run", *args, "--executor", "ray", "--db", str(db))
    env = {"RAY_ADDRESS": cluster.address}
    sigkill_at(command, " done in ", env=env)  # the first unit is committed, the second is not
    again = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, **env, "TQDM_DISABLE": "1"}
    )
    assert again.returncode == 0, again.stderr
    assert "already done (skipped)" in again.stdout
    assert_same_tables(db, reference)


def test_a_checkpoint_that_cannot_load_fails_its_units_alone(cluster, job, checkpoints, tmp_path):
    _, config = job
    broken = tmp_path / "broken"
    shutil.copytree(checkpoints["llama"], broken)
    config_file = broken / "config.json"  # weights of other shapes than the config says: planning reads
    settings = json.loads(config_file.read_text())  # the header, loading the model fails
    config_file.write_text(json.dumps({**settings, "intermediate_size": settings["intermediate_size"] // 2}))
    db = tmp_path / "broken.duckdb"
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        with pytest.raises(UnitsFailedError) as failed:
            run(RunConfig(db=db, executor="ray", **{**config, "models": (str(broken), config["models"][0])}))
    finally:
        ray.shutdown()
    message = str(failed.value)
    assert "\n" not in message and message.startswith("2 of 4 units failed") and "broken" in message
    result = failed.value.result
    assert result is not None and len(result.units) == 2
    assert {Path(u.checkpoint).name for u in result.units} == {Path(config["models"][0]).name}


def test_a_killed_shard_rerun_and_merged_twice_equals_one_run(job, reference, tmp_path):
    args, _ = job
    shards = tmp_path / "shards"
    first = sago_cmd("-v", "run", *args, "--shard", "0/2", "--shard-dir", str(shards))
    sigkill_at(first, " started: ")  # killed in its unit (or, on a fast machine, just after it)
    for shard in ("0/2", "1/2"):  # the killed task again, then the other one
        done = subprocess.run(
            sago_cmd("run", *args, "--shard", shard, "--shard-dir", str(shards)),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr
    merged = tmp_path / "merged.duckdb"
    first_merge = subprocess.run(
        sago_cmd("merge", str(shards), "--db", str(merged)), capture_output=True, text=True, timeout=600
    )
    assert first_merge.returncode == 0, first_merge.stderr
    assert "merged 2 units" in first_merge.stdout
    assert_same_tables(merged, reference)
    again = merge_shards([shards], merged)  # the same shards once more: nothing added
    assert again.merged == [] and len(again.already) == 2
    assert_same_tables(merged, reference)


@pytest.mark.slow
def test_a_cluster_started_with_ray_start_is_joined_through_ray_address(job, reference, tmp_path):
    """The README's way: ``ray start --head`` in a shell, then ``sago run --executor ray`` with RAY_ADDRESS.
    (``ray stop`` ends every Ray process of this machine: a slow test, run alone.)"""
    args, _ = job
    ray_cli = [str(Path(sys.executable).with_name("ray"))]
    port = "6391"
    started = subprocess.run(
        [
            *ray_cli,
            "start",
            "--head",
            "--port",
            port,
            "--num-cpus",
            "1",
            "--include-dashboard",
            "false",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert started.returncode == 0, started.stderr
    try:
        db = tmp_path / "joined.duckdb"
        done = subprocess.run(
            sago_cmd("run", *args, "--executor", "ray", "--db", str(db)),
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "RAY_ADDRESS": "auto", "TQDM_DISABLE": "1"},  # the cluster `ray start` started
        )
        assert done.returncode == 0, done.stderr
        assert_same_tables(db, reference)
    finally:
        subprocess.run([*ray_cli, "stop", "--force"], capture_output=True, timeout=120)
