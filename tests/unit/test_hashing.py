"""Content hashes remembered by file stamps: reused while the files are unchanged, recomputed after any write."""

from __future__ import annotations

import hashlib

from sago_fast.hashing import file_sha256, remembered


def test_hash_is_remembered_until_a_file_changes(tmp_path):
    file = tmp_path / "weights.bin"
    file.write_bytes(b"a" * 1000)
    calls = []

    def compute():
        calls.append(1)
        return file_sha256(file)

    memo = tmp_path / "cache"
    first = remembered("test", [file], compute, memo)
    assert first == hashlib.sha256(b"a" * 1000).hexdigest()
    assert remembered("test", [file], compute, memo) == first and len(calls) == 1  # looked up, not read
    with file.open("r+b") as handle:  # same size, same inode, other bytes
        handle.write(b"b")
    changed = remembered("test", [file], compute, memo)
    assert len(calls) == 2 and changed == hashlib.sha256(b"b" + b"a" * 999).hexdigest()
    assert remembered("other kind", [file], compute, memo) == changed and len(calls) == 3
    assert remembered("test", [file], compute, None) == changed and len(calls) == 4  # no memo: always read


def test_an_unwritable_memo_only_costs_a_rehash(tmp_path):
    file = tmp_path / "w.bin"
    file.write_bytes(b"x")
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the memo folder would go")
    assert remembered("test", [file], lambda: file_sha256(file), blocker) == hashlib.sha256(b"x").hexdigest()


def test_many_checkpoints_are_resolved_in_order_on_threads_and_gguf_files_one_at_a_time(tmp_path):
    import threading

    import pytest

    from sago_fast.checkpoints.resolve import resolve_each

    def where(i):
        return i, threading.current_thread().name

    folders = [str(tmp_path / f"step-{i}") for i in range(5)]
    got = resolve_each(folders, where)
    assert [i for i, _ in got] == list(range(5))
    assert all(name.startswith("sago-hash") for _, name in got)
    with_gguf = [*folders[:2], str(tmp_path / "model.gguf")]  # converted through torch: one at a time
    assert {name for _, name in resolve_each(with_gguf, where)} == {threading.current_thread().name}
    assert resolve_each(folders[:1], where) == [(0, threading.current_thread().name)]

    def second_and_fourth_fail(i):
        if i in (1, 3):
            raise ValueError(f"checkpoint {i}")
        return i

    with pytest.raises(ValueError, match="checkpoint 1"):
        resolve_each(folders, second_and_fourth_fail)
