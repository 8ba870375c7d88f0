"""The README runs as written: every fenced Python, shell and SQL block is executed on its own, in a fresh
folder holding what `sago demo` writes (and nothing else), unless an HTML comment right above it says why it
is not (``<!-- readme-test: skip: reason -->``: a GPU, a cluster, minutes of a real model, or the two
`make` commands themselves). The demo's table is checked against the README's on the way.

Paths under ``/tmp/`` in a block are moved into the test's folder, so two test runs never share files.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.built_once import built_once

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SKIP = re.compile(r"<!-- readme-test: skip: (?P<reason>[^>]+?) -->\s*$")
LANGUAGES = ("python", "bash", "sql")


@dataclass(frozen=True)
class Block:
    language: str
    line: int  # of the opening fence
    text: str
    skip: str | None  # why it is not run

    @property
    def name(self) -> str:
        return f"{self.language}@{self.line}"


def readme_blocks() -> list[Block]:
    blocks, lines = [], README.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        indent, language = fence.group(1), fence.group(2)
        start = i
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        above = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        skip = SKIP.search(above)
        if language in LANGUAGES:
            blocks.append(Block(language, start + 1, "\n".join(body) + "\n", skip and skip["reason"]))
    return blocks


BLOCKS = readme_blocks()


@pytest.fixture(scope="session")
def demo_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where `sago demo` ran as a new user runs it (README: `make demo`), once for the test run."""

    def demo(folder: Path) -> None:
        (folder / "tmp").mkdir()
        done = subprocess.run(
            [str(Path(sys.executable).parent / "sago"), "demo"],
            cwd=folder,
            env=_env(folder),
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        (folder / "demo-stdout.txt").write_text(done.stdout, encoding="utf-8")

    return built_once(tmp_path_factory, "readme", demo)


def _env(folder: Path) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "SAGO_CACHE_DIR": str(folder / "cache"),
        "HF_HUB_OFFLINE": "1",
    }


def _in_folder(text: str, folder: Path) -> str:
    return text.replace("/tmp/", f"{folder}/tmp/")


def _table(text: str) -> list[list[str]]:
    rows = [line.split() for line in text.strip().splitlines()]
    return [r for r in rows if r and not set(r[0]) <= {"-"} and not r[0].startswith("(")]


def _same_cell(a: str, b: str) -> bool:
    """Equal, or numbers equal to within one unit of the last printed digit."""
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    digits = max(len(s.split(".")[1]) if "." in s else 0 for s in (a, b))
    return abs(x - y) <= 1.01 * 10**-digits


def test_demo_prints_the_readmes_table(demo_folder):
    readme_table = README.split("### `sago demo`", 1)[1].split("```\nmodel", 1)[1].split("```", 1)[0]
    expected = _table("model" + readme_table)
    printed = (demo_folder / "demo-stdout.txt").read_text(encoding="utf-8")
    got = _table(printed.split("\n\n", 1)[0].split("\ndesign: ", 1)[0])  # the table, not the design line
    assert [r[:2] for r in got] == [r[:2] for r in expected]
    assert got[0] == expected[0]
    for ours, theirs in zip(got[1:], expected[1:], strict=True):
        assert len(ours) == len(theirs) and all(map(_same_cell, ours, theirs)), (ours, theirs)


def test_every_block_is_run_or_says_why_not():
    assert len(BLOCKS) > 30
    for block in BLOCKS:
        assert block.skip is None or len(block.skip) > 10, block.name


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language != "sql"], ids=lambda b: b.name)
def test_block_runs_as_written(block, demo_folder, tmp_path):
    if block.skip:
        pytest.skip(block.skip)
    # each block on its own: a copy of the demo folder, so that blocks never see each other's files
    folder = tmp_path / "work"
    shutil.copytree(demo_folder, folder, symlinks=True, ignore=shutil.ignore_patterns("cache"))
    os.symlink(demo_folder / "cache", folder / "cache")
    text = _in_folder(block.text, folder)
    if block.language == "python":
        command = [sys.executable, "-c", text]
    else:
        command = ["bash", "-euo", "pipefail", "-c", text]
    done = subprocess.run(command, cwd=folder, env=_env(folder), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{block.name}:\n{block.text}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


def test_sql_blocks_run_on_the_demo_database(demo_folder):
    """Every SQL block, pasted as printed into ``sago query`` (standard input: a block may start with a
    ``--`` comment and hold several statements), returns rows for each of its statements."""
    db = demo_folder / "sago_out" / "demo" / "sago.duckdb"
    sago = str(Path(sys.executable).parent / "sago")
    for block in BLOCKS:
        if block.language != "sql" or block.skip:
            continue
        done = subprocess.run(
            [sago, "query", "--db", str(db), "--format", "json", "-"],
            input=block.text,
            cwd=demo_folder,
            env=_env(demo_folder),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{block.name}: {done.stderr[-2000:]}"
        import json

        results = [json.loads(part) for part in done.stdout.split("\n\n")]
        assert results and all(results), block.name  # every statement returned rows


def test_the_quoted_number_of_significant_changes_is_the_demos(demo_folder):
    """ "the N significant changes" in What changed over training counts what `sago stats` prints."""
    from sago_fast.store import Store

    quoted = int(re.search(r"the (\d+) significant changes; the first of them", README).group(1))
    with Store(demo_folder / "sago_out" / "demo" / "sago.duckdb", read_only=True) as store:
        found = store.query("SELECT count(*) FROM checkpoint_changes WHERE significant")[1][0][0]
    assert quoted == found
