"""The errors a new user meets first: one `sago: error:` line, exit code 2, found before any work starts
(nothing trained, exported or written), naming the flag the user typed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ZOO = Path(__file__).resolve().parents[2] / "sago_fast" / "zoo" / "shipped" / "step-01200"


def sago(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sago_fast.cli.app", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def one_line(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("sago: error:"), proc.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def unwritable(tmp_path) -> Path:
    """A folder no file can be created in, even by root: a path below a regular file."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    return blocker / "out"


def test_bench_sizes_name_the_flag(tmp_path):
    one_line(
        sago("bench", "-m", str(ZOO), "--json", str(tmp_path / "b.json"), "--batch-sizes", "a,b"),
        "--batch-sizes",
        "'a'",
    )
    cache = {"SAGO_CACHE_DIR": str(tmp_path / "cache")}
    proc = sago("bench", "-m", str(ZOO), "--json", str(tmp_path / "b.json"), "--batch-sizes", "0", env=cache)
    one_line(proc, "--batch-sizes", "at least 1")
    assert not (tmp_path / "cache").exists()  # before the model was exported or loaded (was ~12 s of work)
    one_line(
        sago("bench", "-m", str(ZOO), "--json", str(tmp_path / "b.json"), "--gen-tokens", "0"), "--gen-tokens"
    )
    assert not (tmp_path / "b.json").exists()


@pytest.mark.parametrize("value", ["0", "-3"])
def test_zoo_eval_examples_must_be_positive(tmp_path, value):
    one_line(sago("zoo", "--out", str(tmp_path / "zoo"), "--eval-examples", value), "--eval-examples")
    assert not (tmp_path / "zoo").exists()


def test_run_names_the_flags(tmp_path):
    db = tmp_path / "r.duckdb"
    one_line(
        sago("run", "-m", str(ZOO), "-d", "capitals", "--db", str(db), "-k", "0"), "-k/--variants-per-family"
    )
    one_line(sago("run", "-m", str(ZOO), "-d", "capitals", "--db", str(db), "--limit", "0"), "--limit")
    assert not db.exists()


@pytest.mark.parametrize(
    "command",
    [
        ["report", "--db", "{db}", "-o", "{out}/report.html"],
        ["variants", "write", "-d", "capitals", "--limit", "2", "-o", "{out}/v.jsonl"],
        ["bench", "-m", str(ZOO), "--json", "{out}/b.json", "--repeats", "1"],
        ["export", str(ZOO), "-o", "{out}/onnx"],
        ["probe", str(ZOO), "What is 2 + 3?", "--save", "{out}/p.npz"],
        [
            "run",
            "-m",
            str(ZOO),
            "-d",
            "capitals",
            "--limit",
            "2",
            "--shard",
            "0/1",
            "--shard-dir",
            "{out}/shards",
        ],
        ["run", "-m", str(ZOO), "-d", "capitals", "--limit", "2", "--db", "{out}/r.duckdb"],
        ["demo", "--out", "{out}/demo"],
        ["zoo", "--out", "{out}/zoo"],
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_an_unwritable_output_is_caught_before_work(command, tmp_path, unwritable):
    from sago_fast.store import Store

    db = tmp_path / "r.duckdb"
    Store(db).close()
    args = [a.format(db=db, out=unwritable) for a in command]
    one_line(sago(*args, env={"SAGO_CACHE_DIR": str(tmp_path / "cache")}), str(unwritable.parent))
    assert not (tmp_path / "cache" / "exports").exists()  # nothing was exported first


@pytest.mark.parametrize("command", ["run", "demo", "probe", "bench"])
@pytest.mark.parametrize("device", ["gpu", "cuda"])
def test_devices_are_checked_before_anything_loads(command, device, tmp_path):
    if device == "cuda":
        from sago_fast.runtime.session import cuda_runs

        if cuda_runs()[0]:
            pytest.skip("CUDA runs here")
    args = {
        "run": ["run", "-m", str(ZOO), "-d", "capitals", "--limit", "2", "--db", str(tmp_path / "r.duckdb")],
        "demo": ["demo", "--out", str(tmp_path / "demo")],
        "probe": ["probe", str(ZOO), "What is 2 + 3?"],
        "bench": ["bench", "-m", str(ZOO), "--json", str(tmp_path / "b.json")],
    }[command]
    one_line(sago(*args, "--device", device, env={"SAGO_CACHE_DIR": str(tmp_path / "cache")}), "--device")
    assert not (tmp_path / "r.duckdb").exists() and not (tmp_path / "demo").exists()
    assert not (tmp_path / "cache").exists()


def test_an_unreachable_hub_is_one_line_at_once(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # the discard port: nothing listens, the connection is refused
    proc = subprocess.run(
        [sys.executable, "-m", "sago_fast.cli.app", "variants", "preview", "-d", "hf:nonexistent/dataset"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    one_line(proc, "hf:nonexistent/dataset", "cannot reach")


def test_merge_of_a_missing_folder_says_missing(tmp_path):
    one_line(
        sago("merge", str(tmp_path / "nope"), "--db", str(tmp_path / "m.duckdb")), "no such shard folder"
    )
    assert not (tmp_path / "m.duckdb").exists()


def default_sigint() -> None:
    """In the child: Ctrl-C as a terminal gives it, even when the test runner itself was started in the
    background (a shell starts background jobs with SIGINT ignored, and children inherit that)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_exits_130_even_after_an_interrupted_exec(tmp_path):
    """CPython ends a `python -m` process with SIGINT (-2) when a KeyboardInterrupt passed through any
    exec() of source (dataclasses and Numba build code that way), even if it was caught and handled; the
    CLI must still exit 130 with its one line."""
    import signal

    module = tmp_path / "interrupted_cli.py"
    module.write_text(
        "import sago_fast.cli.app as cli\n"
        "def slow():\n"
        "    print('ready', flush=True)\n"
        "    exec('import time\\nfor _ in range(600):\\n    time.sleep(0.1)')\n"
        "cli.run_app = slow\n"
        "cli.main()\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "interrupted_cli"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
        preexec_fn=default_sigint,
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, (process.returncode, stderr)
    assert stderr.strip().splitlines()[-1].startswith("sago: interrupted")


def cli_in_a_fresh_process(args: list[str]) -> str:
    """Run the CLI with ``args`` in a new interpreter; its stdout, ending with whether torch was imported."""
    code = (
        "import sys\n"
        "from sago_fast.cli.app import app\n"
        f"app({args!r}, standalone_mode=False)\n"
        "print('torch imported:', 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_probe_from_the_export_cache_does_not_import_torch(tmp_path):
    """Start-up: a probe whose export is cached needs transformers' tokenizer only (torch cost ~4.5 s)."""
    args = ["probe", str(ZOO), "What is 2 + 3?", "--cache-dir", str(tmp_path / "exports")]
    assert sago(*args).returncode == 0  # exports
    out = cli_in_a_fresh_process(args)
    assert "torch imported: False" in out and "next_logprobs (1, 1024)" in out


def test_run_with_every_export_cached_does_not_import_torch(tmp_path):
    args = ["run", "-m", str(ZOO), "-d", "capitals", "--limit", "2", "-k", "1", "-F", "typo", "--no-stats"]
    args += ["--cache-dir", str(tmp_path / "exports")]
    first = sago(*args, "--db", str(tmp_path / "a.duckdb"))
    assert first.returncode == 0, first.stderr[-2000:]
    out = cli_in_a_fresh_process([*args, "--db", str(tmp_path / "b.duckdb")])
    assert "torch imported: False" in out and "1 unit run" in out


@pytest.mark.parametrize(
    "flags",
    [
        ["--chunk-memory-mb", "inf"],
        ["--sample-memory-mb", "inf"],
        ["--chunk-memory-mb", "nan"],
        ["--precision", "2"],
        ["--precision", "1"],
        ["--precision", "inf"],
        ["--precision", "2", "--until-separated"],
    ],
    ids=lambda f: " ".join(f),
)
def test_out_of_range_numbers_are_refused_before_work(flags, tmp_path):
    """Infinite memory budgets and precisions no sequence can be wider than: one line, nothing written."""
    db = tmp_path / "r.duckdb"
    models = ["-m", str(ZOO), "-m", str(ZOO.parent / "step-00500")] if "--until-separated" in flags else []
    args = ["run", "-m", str(ZOO), *models[2:], "-d", "capitals", "--limit", "2", "--db", str(db), *flags]
    one_line(sago(*args, env={"SAGO_CACHE_DIR": str(tmp_path / "cache")}), flags[0])
    assert not db.exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--chunk-memory-mb", "abc"], "--chunk-memory-mb"),
        (["--budget", "1.5"], "--budget"),
        (["--limit", "ten"], "--limit"),
        (["--no-such-flag"], "--no-such-flag"),
    ],
)
def test_values_of_the_wrong_type_are_one_line(flags, named, tmp_path):
    """What the command line parser refuses is one `sago: error:` line too, not a boxed usage message."""
    db = tmp_path / "r.duckdb"
    one_line(sago("run", "-m", str(ZOO), "-d", "capitals", "--db", str(db), *flags), named)
    assert not db.exists()


@pytest.mark.parametrize("command", ["report", "stats", "run", "query"])
def test_a_database_sago_did_not_create_is_refused_untouched(command, tmp_path):
    """A DuckDB file of the user's own (a table, no sago schema): every command refuses it in one line
    and leaves it byte for byte as it was."""
    import duckdb

    db = tmp_path / "theirs.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE sales (day DATE, amount DOUBLE)")
    con.execute("INSERT INTO sales VALUES ('2026-01-01', 3.5)")
    con.close()
    before = db.read_bytes()
    args = {
        "report": ["report", "--db", str(db), "-o", str(tmp_path / "r.html")],
        "stats": ["stats", "--db", str(db)],
        "run": ["run", "-m", str(ZOO), "-d", "capitals", "--limit", "2", "--db", str(db)],
        "query": ["query", "--db", str(db), "SELECT count(*) FROM sales"],
    }[command]
    proc = sago(*args, env={"SAGO_CACHE_DIR": str(tmp_path / "cache")})
    if command == "query":  # reading is harmless: it may read any DuckDB file
        assert proc.returncode in (0, 2)
    else:
        one_line(proc, "not a sago results file", str(db))
    assert db.read_bytes() == before
    con = duckdb.connect(str(db), read_only=True)
    assert [t[0] for t in con.execute("SHOW TABLES").fetchall()] == ["sales"]
    con.close()
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("how", ["--cache-dir", "SAGO_CACHE_DIR"])
def test_an_unwritable_cache_is_caught_before_work(how, tmp_path, unwritable):
    db = tmp_path / "r.duckdb"
    args = ["run", "-m", str(ZOO), "-d", "capitals", "--limit", "2", "--db", str(db)]
    if how == "--cache-dir":
        proc = sago(*args, "--cache-dir", str(unwritable), env={"SAGO_CACHE_DIR": str(tmp_path / "c")})
    else:
        proc = sago(*args, env={"SAGO_CACHE_DIR": str(unwritable)})
    one_line(proc, how.lstrip("-") if how == "SAGO_CACHE_DIR" else how, str(unwritable))
    assert not db.exists()
