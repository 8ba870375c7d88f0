"""The CLI: help for every command, one-line errors with non-zero exit, export/probe/query/demo end to end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from sago_fast.cli.app import app

runner = CliRunner()


def sago(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real console entry point in a subprocess (errors are handled in main())."""
    return subprocess.run(
        [sys.executable, "-m", "sago_fast.cli.app", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def test_every_command_has_help():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    commands = [c.name for c in app.registered_commands]
    assert {"export", "query", "demo", "probe", "zoo"} <= set(commands)
    for name in [*commands, "variants list", "variants preview", "variants write"]:
        sub = runner.invoke(app, [*name.split(), "--help"])
        assert sub.exit_code == 0, name
        assert "Usage" in sub.output


def _assert_one_line_error(proc: subprocess.CompletedProcess, fragment: str) -> None:
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("sago: error:")]
    assert len(errors) == 1, proc.stderr
    assert fragment in errors[0], errors[0]
    assert "Traceback" not in proc.stderr


def test_export_errors(tmp_path, checkpoints, tokenizer):
    empty = tmp_path / "empty"
    empty.mkdir()
    pickled = tmp_path / "pickled"
    shutil.copytree(checkpoints["gpt2"], pickled)
    import torch
    from safetensors.torch import load_file

    torch.save(load_file(str(pickled / "model.safetensors")), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    out = tmp_path / "out"
    cache = tmp_path / "cache"
    for target, fragment in [
        (tmp_path / "missing", "no such checkpoint"),
        (empty, "no config.json"),
        (pickled, "safetensors only"),
    ]:
        proc = sago("export", str(target), "-o", str(out), "--cache-dir", str(cache))
        _assert_one_line_error(proc, fragment)
        assert not out.exists()


def test_export_unsupported_architecture(tmp_path, unexportable_checkpoint):
    path = unexportable_checkpoint
    cache = tmp_path / "cache"
    proc = sago("export", str(path), "-o", str(tmp_path / "out"), "--cache-dir", str(cache))
    _assert_one_line_error(proc, "cannot be exported")
    assert not (tmp_path / "out").exists()
    assert not [p for p in cache.iterdir() if p.is_dir()] if cache.exists() else True


def test_export_then_reuse(tmp_path, checkpoints):
    cache = tmp_path / "cache"
    first = sago("export", str(checkpoints["phi3"]), "-o", str(tmp_path / "a"), "--cache-dir", str(cache))
    assert first.returncode == 0, first.stderr
    assert "cache hit" not in first.stdout
    second = sago("export", str(checkpoints["phi3"]), "-o", str(tmp_path / "b"), "--cache-dir", str(cache))
    assert "cache hit" in second.stdout
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["model_type"] == "phi3" and (tmp_path / "b" / "model.onnx").is_file()
    import onnx  # standard ONNX with external data: onnx itself loads and checks it

    onnx.checker.check_model(str(tmp_path / "b" / "model.onnx"))
    graph = onnx.load(str(tmp_path / "b" / "model.onnx"))
    assert sum(i.ByteSize() for i in graph.graph.initializer) > 1000  # the weights were read
    umask = os.umask(0o022)
    os.umask(umask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "b").iterdir() if p.is_file()}
    assert set(modes.values()) == {0o666 & ~umask}, modes  # model.onnx_data as every other file


def test_probe_bad_texts(checkpoints, cache_dir):
    ckpt = str(checkpoints["llama"])
    _assert_one_line_error(sago("probe", ckpt, "ok", "", "--cache-dir", str(cache_dir)), "empty prompt")
    _assert_one_line_error(
        sago("probe", ckpt, "word " * 1200, "--cache-dir", str(cache_dir)),
        "longer than the model's 512 positions",
    )


def test_demo_then_query(tmp_path, monkeypatch):
    """The demo pipeline on a small zoo, then `sago query` on its database (the CLI demo uses the full zoo)."""
    monkeypatch.setenv("SAGO_CACHE_DIR", str(tmp_path / "cache"))  # the small zoo is trained into it
    from sago_fast.demo import DemoConfig, run_demo
    from sago_fast.zoo import ZooConfig

    small = ZooConfig(suites=("capitals",), examples_per_suite=24, save_steps=(10, 60), hidden=32, layers=1)
    config = DemoConfig(out_dir=tmp_path / "demo", n_examples=4, k=1, zoo=small)
    result = run_demo(config, progress=False)
    db = result.db_path
    assert len(result.units) == 2 * 3 and len({u.model_id for u in result.units}) == 2
    n_variants = json.loads(
        sago("query", "--db", db, "--format", "json", "SELECT count(*) AS n FROM variants").stdout
    )[0]["n"]
    as_json = sago(
        "query", "--db", db, "--format", "json", "SELECT count(*) AS n FROM outputs WHERE replicate = 0"
    )
    assert json.loads(as_json.stdout) == [{"n": 2 * n_variants}]
    as_csv = sago(
        "query", "--db", db, "--format", "csv", "SELECT example_id FROM examples ORDER BY 1 LIMIT 2"
    )
    assert as_csv.stdout.splitlines() == ["example_id", "capitals-00000", "capitals-00001"]
    # SQL from a file or standard input, starting with a -- comment, several statements in turn
    script = tmp_path / "q.sql"
    script.write_text(
        "-- examples, then runs\nSELECT count(*) AS n FROM examples;\nSELECT count(*) AS r FROM runs;\n"
    )
    for args, stdin in (((("-f", str(script)),), None), ((("-",),), script.read_text())):
        flat = [a for group in args for a in group]
        done = subprocess.run(
            [sys.executable, "-m", "sago_fast.cli.app", "query", "--db", db, "--format", "csv", *flat],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split("\n\n")[0].splitlines()[0] == "n"
        assert done.stdout.split("\n\n")[1].splitlines() == ["r", "1"]
    _assert_one_line_error(sago("query", "--db", db, "-f", "csv", "SELECT 1"), "--format csv")
    _assert_one_line_error(sago("query", "--db", db, "SELEC nonsense"), "SQL error")
    _assert_one_line_error(
        sago("query", "--db", str(tmp_path / "nope.duckdb"), "SELECT 1"), "no such database"
    )
    # running again continues the same run: every unit is done, nothing is added
    run_demo(config, progress=False)
    counts = sago(
        "query",
        "--db",
        db,
        "--format",
        "json",
        "SELECT (SELECT count(*) FROM models) m, (SELECT count(*) FROM variants) v, (SELECT count(*) FROM runs) r",
    )
    assert json.loads(counts.stdout) == [{"m": 2, "v": n_variants, "r": 1}]


def test_variants_commands(tmp_path):
    listing = sago("variants", "list")
    assert listing.returncode == 0
    names = [line.split()[0] for line in listing.stdout.splitlines() if line and not line.startswith(" ")]
    assert len(names) >= 12 and "option_permutation" in names
    preview = sago("variants", "preview", "-d", "comparison", "-F", "pair_swap", "-n", "1")
    assert "comparison-00000/pair_swap/0" in preview.stdout and "(canonical)" in preview.stdout
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert sago("variants", "write", "-d", "arithmetic", "--limit", "5", "-o", str(a)).returncode == 0
    assert sago("variants", "write", "-d", "arithmetic", "--limit", "5", "-o", str(b)).returncode == 0
    assert a.read_bytes() == b.read_bytes() and len(a.read_text().splitlines()) > 5 * 10


BAD_DATASETS = [
    (b"", "no examples"),
    (b'{"id": "1", "question": "Q?", "options": ["a", "b"], "answer": 0}\n{"id": \n', ":2: malformed JSON"),
    (b'{"id": "1", "options": ["a", "b"], "answer": 0}\n', ":1: field 'question' is missing"),
    (
        b'{"id": "1", "question": "Q?", "options": ["a", "b"], "answer": 5}\n',
        ":1: field 'answer' = 5 is out of range",
    ),
    (
        b'{"id": "1", "question": "Q?", "options": ["a", "b"], "answer": 0}\n' * 2,
        ":2: field 'id': duplicate id",
    ),
    (b'{"id": "1", "question": "", "options": ["a", "b"], "answer": 0}\n', ":1: field 'question' is empty"),
    (b'{"id": "1", "question": "Q\xff?", "options": ["a", "b"], "answer": 0}\n', ":1: not valid UTF-8"),
]


@pytest.mark.parametrize("content,fragment", BAD_DATASETS)
def test_variants_write_bad_input(tmp_path, content, fragment):
    data = tmp_path / "data.jsonl"
    data.write_bytes(content)
    out = tmp_path / "out.jsonl"
    proc = sago("variants", "write", "-d", str(data), "-o", str(out))
    _assert_one_line_error(proc, fragment)
    assert str(data) in proc.stderr
    assert not out.exists() and not list(tmp_path.glob(".out.jsonl*"))


def test_unknown_family_and_dataset():
    _assert_one_line_error(
        sago("variants", "preview", "-d", "capitals", "-F", "tempate"), "did you mean 'template'"
    )
    _assert_one_line_error(sago("variants", "preview", "-d", "capitols"), "did you mean 'capitals'")


def test_query_is_read_only(tmp_path):
    from sago_fast.store import Store

    db = tmp_path / "x.duckdb"
    Store(db).close()
    proc = sago("query", "--db", str(db), "DELETE FROM runs")
    assert proc.returncode != 0
    assert "read-only" in proc.stderr.lower() or "read only" in proc.stderr.lower()


def test_held_database_is_waited_for_then_a_clear_error(locked_db):
    proc = sago("query", "--db", str(locked_db), "SELECT 1", env={"SAGO_DB_WAIT": "2"})
    _assert_one_line_error(proc, "still held by PID")
    assert "waiting for" in proc.stderr and str(locked_db) in proc.stderr  # said while it waited


@pytest.mark.parametrize("fmt", ["xml"])
def test_bad_format(tmp_path, fmt):
    db = tmp_path / "x.duckdb"
    from sago_fast.store import Store

    Store(db).close()
    _assert_one_line_error(sago("query", "--db", str(db), "--format", fmt, "SELECT 1"), "--format")


def test_cli_module_is_light():
    """Importing the CLI must not import torch/transformers (they cost seconds)."""
    code = "import sys, sago_fast.cli.app; print(any(m in sys.modules for m in ('torch', 'transformers', 'onnxruntime')))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "False"


def test_cuda_without_gpu_is_a_clear_error_before_any_export(checkpoints, tmp_path):
    from sago_fast.runtime.session import cuda_runs

    if cuda_runs()[0]:
        pytest.skip("this machine has a working CUDA provider")
    cache = tmp_path / "cache"
    proc = sago("probe", str(checkpoints["llama"]), "hi", "--device", "cuda", "--cache-dir", str(cache))
    _assert_one_line_error(proc, "device 'cuda' asked")
    assert not cache.exists()


def test_stats_and_report_commands(run_db, tmp_path):
    db, result = run_db
    copy = tmp_path / "copy.duckdb"
    shutil.copy(db, copy)
    stats = sago("stats", "--db", str(copy), "--resamples", "200", "--seed", "3")
    assert stats.returncode == 0, stats.stderr
    assert f"statistics of run {result.run_id}" in stats.stdout and "model_scores" in stats.stdout
    report = sago("report", "--db", str(copy), "-o", str(tmp_path / "r.html"))
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    for command in ("stats", "report"):
        _assert_one_line_error(sago(command, "--db", str(tmp_path / "nope.duckdb")), "no such database")
    _assert_one_line_error(sago("stats", "--db", str(copy), "--run", "nope"), "no run 'nope'")
    _assert_one_line_error(
        sago("stats", "--db", str(copy), "--resamples", "5"), "--resamples (n_resamples) must be at least 100"
    )
