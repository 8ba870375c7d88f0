"""The embedded default job behind ``sago demo`` / ``make demo``.

1. The zoo: tiny Llama-style models trained on the built-in suites, checkpoints along training. The
   package ships the default zoo (the same bytes on every machine); another configuration is trained once
   into the shared zoo cache (:mod:`sago_fast.zoo.sources`).
2. ``sago run`` over every zoo checkpoint × the built-in ``capitals``, ``comparison`` (option scoring) and
   ``letters`` (greedy generation) suites: variants, ONNX Runtime, the four axes, DuckDB.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from sago_fast.run import RunConfig, RunResult, run
from sago_fast.zoo import ZooConfig, build_zoo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoConfig:
    """out_dir: zoo, exports and database. datasets/n_examples/k: what is rendered. device: cpu|cuda|auto."""

    out_dir: Path = Path("sago_out/demo")
    device: str = "cpu"
    datasets: tuple[str, ...] = ("capitals", "comparison", "letters")
    n_examples: int = 40
    k: int = 1
    zoo: ZooConfig = field(default_factory=ZooConfig)


def run_demo(
    config: DemoConfig = DemoConfig(), *, progress: bool = True, light_start: bool = False
) -> RunResult:
    """The device and the output folder are checked before anything is copied, trained or exported.
    light_start: see :func:`sago_fast.run.run` (the CLI's choice)."""
    from sago_fast.atomic import check_writable
    from sago_fast.errors import InputError
    from sago_fast.runtime.session import check_device

    if config.n_examples < 1:
        raise InputError(f"--limit must be at least 1, not {config.n_examples}")
    check_device(config.device)
    check_writable(config.out_dir, what="--out", directory=True)
    zoo = build_zoo(config.out_dir / "zoo", config.zoo)
    run_config = RunConfig(
        models=tuple(str(p) for p in zoo.checkpoints),
        datasets=config.datasets,
        db=config.out_dir / "sago.duckdb",
        variants_per_family=config.k,
        limit=config.n_examples,
        device=config.device,
        cache_dir=config.out_dir / "exports",
    )
    return run(run_config, command="demo", progress=progress, light_start=light_start)
