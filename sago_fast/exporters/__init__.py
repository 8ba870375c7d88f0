"""Optimum-based ONNX export of causal LMs with pooled hidden-state outputs, and its cache."""

from sago_fast.exporters.cache import ExportCache, ExportedModel, export_key
from sago_fast.exporters.export import export_checkpoint

__all__ = ["ExportCache", "ExportedModel", "export_checkpoint", "export_key"]
