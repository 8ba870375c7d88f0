"""The GPU machine's wheels travel in parts: pack_wheels.sh splits them, assemble.sh joins, checks and
installs them. Round trip on a small fake wheel set: the same bytes, an importable install, and a damaged
part refused."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

GPU = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"


def fake_wheel(folder: Path, name: str, payload: bytes) -> Path:
    """A valid pure-Python wheel: ``name/__init__.py`` with ``DATA`` of ``len(payload)`` bytes."""
    files = {
        f"{name}/__init__.py": f"SIZE = {len(payload)}\n".encode(),
        f"{name}/blob.bin": payload,
        f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{name}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for path, data in files.items()
    ]
    record.append(f"{name}-1.0.dist-info/RECORD,,")
    files[f"{name}-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


@pytest.fixture
def packed(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    originals = [
        fake_wheel(wheels, "sago_fake_a", os.urandom(1_500_000)),
        fake_wheel(wheels, "sago_fake_b", os.urandom(700_000)),
    ]
    parts = tmp_path / "parts"
    done = subprocess.run(
        ["bash", str(GPU / "pack_wheels.sh"), str(parts), "1"],
        env={**os.environ, "WHEELS_DIR": str(wheels)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return originals, parts


def test_pack_then_assemble_gives_the_same_wheels_installed(packed, tmp_path):
    originals, parts = packed
    assert len(sorted(parts.glob("part-*"))) == 3  # 2.2 MB in parts of 1 MiB
    target, joined = tmp_path / "site", tmp_path / "joined"
    done = subprocess.run(
        ["bash", str(GPU / "assemble.sh"), str(parts), str(target), str(joined)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    for wheel in originals:
        assert (joined / "wheels" / wheel.name).read_bytes() == wheel.read_bytes()  # byte for byte
    imported = subprocess.run(
        [sys.executable, "-c", "import sago_fake_a, sago_fake_b; print(sago_fake_a.SIZE + sago_fake_b.SIZE)"],
        env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
    )
    assert imported.stdout.strip() == "2200000", imported.stderr


def test_a_damaged_part_is_refused(packed, tmp_path):
    _, parts = packed
    part = sorted(parts.glob("part-*"))[1]
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF
    part.write_bytes(bytes(data))
    done = subprocess.run(
        ["bash", str(GPU / "assemble.sh"), str(parts), str(tmp_path / "site")], capture_output=True, text=True
    )
    assert done.returncode != 0 and "damaged" in done.stderr
    assert not list((tmp_path / "site").glob("sago_fake_*"))
