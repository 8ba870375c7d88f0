"""`sago run`: variants → ONNX Runtime → the four axes → DuckDB, for many models and datasets."""

from sago_fast.run.config import RunConfig
from sago_fast.run.pipeline import RunResult, run

__all__ = ["RunConfig", "RunResult", "run"]
