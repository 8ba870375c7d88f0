"""Shared fixtures: tiny checkpoints built locally (no network), an isolated export cache.

``make test`` runs the tests in parallel processes (pytest-xdist, ``--dist loadgroup``). The folders the
session fixtures build (checkpoints, export caches, the real model's conversion, the demo) are built once
for all of them (:func:`built_once`); a module whose module-scoped fixtures are expensive keeps its tests in
one process with ``pytestmark = pytest.mark.xdist_group(...)``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sago_fast.checkpoints.tiny import ARCHITECTURES, TinySize, build_tiny_checkpoint, train_tokenizer
from tests.built_once import built_once

TEST_SIZE = TinySize(max_positions=512)  # long enough for few-shot variants

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _share_the_cores() -> None:
    """Under pytest-xdist, each worker's ONNX Runtime sessions ($SAGO_THREADS) and torch (OMP_NUM_THREADS,
    read when torch is imported: nothing here imports it) take the worker's share of the cores, for this
    process and the commands it starts. Threads that outnumber the cores a process gets wait for each
    other: lm-eval's hf reference on 12 items took 49.7 s on two threads beside a busy core, 25.5 s on one."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        share = str(max(1, (os.cpu_count() or 1) // workers))
        os.environ.setdefault("SAGO_THREADS", share)
        os.environ.setdefault("OMP_NUM_THREADS", share)


_share_the_cores()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", help="run tests marked slow")
    parser.addoption("--rungpu", action="store_true", help="run tests marked gpu (needs CUDA)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "slow" in item.keywords and not config.getoption("--runslow"):
            item.add_marker(pytest.mark.skip(reason="slow: pass --runslow"))
        if "gpu" in item.keywords and not config.getoption("--rungpu"):
            item.add_marker(pytest.mark.skip(reason="gpu: pass --rungpu on a CUDA machine"))


@pytest.fixture(scope="session")
def tokenizer():
    return train_tokenizer()


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> dict[str, Path]:
    """One tiny random checkpoint per registered architecture."""

    def build(root: Path) -> None:
        for arch in ARCHITECTURES:
            build_tiny_checkpoint(arch, root / arch, TEST_SIZE, tokenizer=tokenizer)

    root = built_once(tmp_path_factory, "checkpoints", build)
    return {arch: root / arch for arch in ARCHITECTURES}


@pytest.fixture(scope="session")
def smol_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real model's cache root for the session: converted GGUF files in gguf/, exports in exports/
    (converted and exported once, whichever test needs it first; the caches lock their own entries)."""
    return built_once(tmp_path_factory, "smollm2")


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session-wide export cache, so each architecture is exported once for the whole test run."""
    return built_once(tmp_path_factory, "export-cache")


@pytest.fixture
def locked_db(tmp_path: Path):
    """A results file held open for writing by another process for the duration of the test."""
    import subprocess
    import sys

    from sago_fast.store import Store

    db = tmp_path / "locked.duckdb"
    Store(db).close()
    code = f"import duckdb, time; c = duckdb.connect({str(db)!r}); print('ok', flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ok"
        yield db
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture(scope="session")
def unexportable_checkpoint(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> Path:
    """A valid safetensors checkpoint of an architecture Optimum's ONNX exporter does not support (mamba)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    path = tmp_path_factory.mktemp("unexportable") / "mamba"
    config = AutoConfig.for_model(
        "mamba", vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, state_size=4
    )
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def run_db(tmp_path_factory: pytest.TempPathFactory, checkpoints, cache_dir):
    """`sago run` (statistics included) of 3 checkpoints × 2 datasets, 5 examples, 1 variant per family."""
    from sago_fast.run import RunConfig, run

    db = tmp_path_factory.mktemp("run") / "r.duckdb"
    config = RunConfig(
        models=(str(checkpoints["llama"]), str(checkpoints["qwen2"]), str(checkpoints["gpt2"])),
        datasets=("capitals", "comparison"),
        db=db,
        limit=5,
        variants_per_family=1,
        cache_dir=cache_dir,
    )
    return db, run(config, progress=False)
