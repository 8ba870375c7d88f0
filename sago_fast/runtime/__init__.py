"""ONNX Runtime: sessions with verified providers, padding and batching, and the probe."""
