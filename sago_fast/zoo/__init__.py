"""The demo zoo: tiny causal LMs trained on the built-in suites, saved at several steps."""

from sago_fast.zoo.sources import build_zoo, shared_zoo
from sago_fast.zoo.train import ZooConfig, ZooResult, train_zoo

__all__ = ["ZooConfig", "ZooResult", "build_zoo", "shared_zoo", "train_zoo"]
