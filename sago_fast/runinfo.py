"""Run metadata: ids, package versions, and the ``runs`` row."""

from __future__ import annotations

import functools
import json
import platform
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

RECORDED_PACKAGES = (
    "sago_fast",
    "torch",
    "transformers",
    "optimum",
    "optimum-onnx",
    "onnx",
    "onnxruntime-gpu",
    "numpy",
    "numba",
    "duckdb",
    "scipy",
)


def versions_of(packages: tuple[str, ...]) -> dict[str, str]:
    """Installed version of each distribution ("absent" when it is not installed)."""
    return {name: _installed_version(name) for name in packages}


@functools.cache
def _installed_version(name: str) -> str:
    """Read from the distribution's metadata once per process (~2 ms a package; every cache look-up and
    run plan asks)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def package_versions() -> dict[str, str]:
    """Python and the recorded packages' versions, for the ``runs`` table."""
    return {"python": platform.python_version(), **versions_of(RECORDED_PACKAGES)}


def run_row(
    run_id: str, command: str, config: dict[str, Any], device: str, provider: str, status: str
) -> dict[str, list[Any]]:
    """Columns for one ``runs`` row."""
    from sago_fast import __version__

    return {
        "run_id": [run_id],
        "created_at": [datetime.now(timezone.utc).replace(tzinfo=None)],
        "command": [command],
        "config_json": [json.dumps(config, sort_keys=True, default=str)],
        "sago_version": [__version__],
        "versions_json": [json.dumps(package_versions(), sort_keys=True)],
        "device": [device],
        "provider": [provider],
        "status": [status],
    }
