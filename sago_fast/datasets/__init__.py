"""Datasets: readers for JSONL/CSV/Parquet/HF save_to_disk folders and built-in synthetic suites."""

from sago_fast.datasets.readers import FieldMap, read_examples

__all__ = ["FieldMap", "read_examples"]
