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
