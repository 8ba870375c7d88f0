"""How a unit streams: the memory budgets of its chunks and of its dataset-level state (a light module:
the configuration imports it before any library starts)."""

from __future__ import annotations

from dataclasses import dataclass

from sago_fast import defaults
from sago_fast.errors import InputError

MB = 1 << 20
MAX_MB = 1e9  # a petabyte: beyond any machine, and still an integer number of bytes


@dataclass(frozen=True)
class StreamSettings:
    """chunk_memory_mb: what one chunk's probe arrays may take (the chunk holds at least one example);
    sample_memory_mb: what neighbourhood metrics (kNN, CKA) may keep of example activations before they
    use a seeded sample of examples; seed: that sample's seed."""

    chunk_memory_mb: float = defaults.CHUNK_MEMORY_MB
    sample_memory_mb: float = defaults.SAMPLE_MEMORY_MB
    seed: int = defaults.SEED

    def __post_init__(self) -> None:
        for name in ("chunk_memory_mb", "sample_memory_mb"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 < value < MAX_MB:
                raise InputError(
                    f"--{name.replace('_', '-')} ({name}) must be a positive, finite number of MB "
                    f"(below {MAX_MB:.0e}), not {value!r}"
                )

    @property
    def chunk_bytes(self) -> int:
        return int(self.chunk_memory_mb * MB)

    @property
    def sample_bytes(self) -> int:
        return int(self.sample_memory_mb * MB)
