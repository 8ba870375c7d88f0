"""What a new user meets after a first run: the stored prompt is the text the model read, and a results
file that cannot be written is still reported on (its statistics say in one line why they are not stored)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import duckdb
import pytest

from sago_fast.errors import StoreError
from sago_fast.run import RunConfig, run
from sago_fast.store import Store
from tests.integration.test_units import sago_cmd

pytestmark = pytest.mark.xdist_group("first_steps")  # one module fixture (a small run), one process

SYSTEM = "Answer with the option only."
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def _config(model, db, cache_dir, **more) -> RunConfig:
    return RunConfig(
        models=(str(model),),
        datasets=("capitals",),
        db=db,
        limit=2,
        families=("typo",),
        variants_per_family=1,
        cache_dir=cache_dir,
        **more,
    )


@pytest.fixture(scope="module")
def plain_run(checkpoints, cache_dir, tmp_path_factory):
    db = tmp_path_factory.mktemp("plain") / "r.duckdb"
    run(_config(checkpoints["llama"], db, cache_dir), progress=False)
    return db


def test_the_stored_prompt_is_the_text_the_model_read(plain_run, checkpoints, cache_dir, tmp_path):
    with Store(plain_run, read_only=True) as store:  # plain prompts: what the model read is the prompt
        assert store.query("SELECT count(*) FROM outputs WHERE prompt_read IS NOT NULL")[1][0][0] == 0
    chatty = tmp_path / "chatty"
    shutil.copytree(checkpoints["llama"], chatty)
    tokenizer_config = chatty / "tokenizer_config.json"
    settings = json.loads(tokenizer_config.read_text())
    tokenizer_config.write_text(json.dumps({**settings, "chat_template": CHAT_TEMPLATE}))
    db = tmp_path / "chat.duckdb"
    run(
        _config(chatty, db, cache_dir, chat_template="auto", system_prompt=SYSTEM, stats=False),
        progress=False,
    )
    with Store(db, read_only=True) as store:
        _, rows = store.query(
            "SELECT v.prompt, o.prompt_read, o.n_prompt_tokens FROM outputs o "
            "JOIN variants v USING (dataset_id, variant_id)"
        )
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(chatty)
    assert len(rows) == 2 * 2 + 2  # two renderings of two items, and the canonical replicate pass
    for prompt, read, n_tokens in rows:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
        expected = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert read == expected and read.startswith(f"<|system|>\n{SYSTEM}\n<|user|>\n")
        assert n_tokens == len(tokenizer(read, add_special_tokens=False)["input_ids"])


def _as_a_user_without_write_permission(monkeypatch, db) -> None:
    """What a user other than the file's owner meets on a 0444 file; root writes any file, so for root
    the two places that would write it are told what the file system tells that user."""
    db.chmod(0o444)
    if os.geteuid() != 0:
        return
    connect, access = duckdb.connect, os.access

    def connect_as_user(path, *args, read_only=False, **kwargs):  # type: ignore[no-untyped-def]
        if str(path) == str(db) and not read_only:
            raise duckdb.IOException(f'IO Error: Cannot open file "{db}": Permission denied')
        return connect(path, *args, read_only=read_only, **kwargs)

    def access_as_user(path, mode, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path) == str(db) and mode & os.W_OK:
            return False
        return access(path, mode, *args, **kwargs)

    monkeypatch.setattr(duckdb, "connect", connect_as_user)
    monkeypatch.setattr(os, "access", access_as_user)


def test_a_read_only_results_file_is_reported_and_its_statistics_say_why_they_are_not_stored(
    plain_run, tmp_path, monkeypatch
):
    from sago_fast.report import write_report
    from sago_fast.stats import run_stats

    db = tmp_path / "read-only.duckdb"
    shutil.copy(plain_run, db)
    before = db.read_bytes()
    _as_a_user_without_write_permission(monkeypatch, db)
    out = write_report(db, tmp_path / "out" / "report.html")  # a report only reads
    assert "<html" in out.read_text(encoding="utf-8").lower()
    with pytest.raises(
        StoreError, match=r"read-only.duckdb: the file is read-only, so the statistics cannot be stored"
    ):
        run_stats(db)
    monkeypatch.undo()
    assert db.read_bytes() == before


def test_merging_a_folder_without_unit_folders_is_an_error(tmp_path):
    empty = tmp_path / "no-units"
    empty.mkdir()
    done = subprocess.run(
        sago_cmd("merge", str(empty), "--db", str(tmp_path / "m.duckdb")), capture_output=True, text=True
    )
    assert done.returncode == 2 and "no unit folders under" in done.stderr
    assert not (tmp_path / "m.duckdb").exists()
