"""Checkpoints: locate and validate them, hash their content, and build tiny ones locally."""

from sago_fast.checkpoints.resolve import Checkpoint, resolve_checkpoint

__all__ = ["Checkpoint", "resolve_checkpoint"]
