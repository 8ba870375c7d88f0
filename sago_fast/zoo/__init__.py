"""The demo zoo: tiny causal LMs trained on the built-in suites, saved at several steps."""

from sago_fast.zoo.train import ZooConfig, ZooResult, build_zoo

__all__ = ["ZooConfig", "ZooResult", "build_zoo"]
