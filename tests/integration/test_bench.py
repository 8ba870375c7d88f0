"""`sago bench` on CPU: both engines measured on the same job, valid JSON, ratios from the medians."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from sago_fast.bench import SCHEMA, BenchConfig, run_bench


def test_bench_measures_both_engines(checkpoints, cache_dir):
    config = BenchConfig(batch_sizes=(1, 4), seq_lens=(16,), gen_batch_sizes=(3,), gen_tokens=5, repeats=2)
    result = run_bench(checkpoints["llama"], config, cache_dir=cache_dir)
    assert result["schema"] == SCHEMA and result["provider"] == "CPUExecutionProvider"
    assert result["versions"]["onnxruntime-gpu"] != "absent" and result["hardware"]["cpu_count"] >= 1
    jobs = [(r["job"], r["batch_size"]) for r in result["results"]]
    assert jobs == [("probe", 1), ("probe", 4), ("generation", 3)]
    for r in result["results"]:
        sago, hf = r["engines"]["sago"], r["engines"]["hf_eager"]
        assert len(sago["repeats_s"]) == len(hf["repeats_s"]) == 2
        assert sago["median_s"] == statistics.median(sago["repeats_s"])
        assert r["ratios"]["sago_vs_hf_eager"] == pytest.approx(hf["median_s"] / sago["median_s"])
        tokens = r["batch_size"] * (16 if r["job"] == "probe" else 5)
        assert r["tokens"] == tokens and sago["tokens_per_s"] == pytest.approx(tokens / sago["median_s"])
    assert result["results"][-1]["greedy_agreement"] == 1.0  # fp32 greedy decoding is token-identical
    json.dumps(result)  # JSON-ready


def test_bench_cli_writes_json(checkpoints, cache_dir, tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sago_fast.cli.app",
            "bench",
            "-m",
            str(checkpoints["gpt2"]),
            "--json",
            str(out),
            "--batch-sizes",
            "2",
            "--seq-lens",
            "8",
            "--gen-batch-sizes",
            "2",
            "--gen-tokens",
            "3",
            "--repeats",
            "1",
            "--cache-dir",
            str(cache_dir),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["schema"] == SCHEMA and {r["job"] for r in data["results"]} == {"probe", "generation"}
    assert "sago/hf" in proc.stdout
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "sago_fast.cli.app",
            "bench",
            "-m",
            str(checkpoints["gpt2"]),
            "--json",
            str(out),
            "--seq-lens",
            "100000",
            "--cache-dir",
            str(cache_dir),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bad.returncode == 2 and "exceeds the model's" in bad.stderr and "Traceback" not in bad.stderr
