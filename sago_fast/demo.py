"""The embedded default job behind ``sago demo`` / ``make demo``.

1. Train (or reuse) the zoo: tiny Llama-style models on the built-in suites, checkpoints along training.
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


def run_demo(config: DemoConfig = DemoConfig(), *, progress: bool = True) -> RunResult:
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
    return run(run_config, command="demo", progress=progress)
