"""Errors sago_fast raises on purpose. The CLI turns each into one line on stderr and exit code 2."""

from __future__ import annotations


class SagoError(Exception):
    """Base class: a known, user-facing failure (bad input, missing file, unsupported model)."""


class CheckpointError(SagoError):
    """The checkpoint path is missing, is not a checkpoint, or uses a refused format."""


class ExportError(SagoError):
    """The checkpoint could not be exported to ONNX (unsupported architecture, exporter failure)."""


class InputError(SagoError):
    """A text or data record the model cannot take (empty, too long, malformed)."""


class DeviceError(SagoError):
    """The requested execution provider is not available or did not activate."""


class StoreError(SagoError):
    """The results database cannot be opened, is locked, or has an unknown schema."""


class OutdatedSchemaError(StoreError):
    """A results file opened read-only has an older schema: opening it read-write once migrates it."""


class DiskFullError(StoreError):
    """A write ran out of disk space (or hit the file size limit); the unit being written was rolled back."""


class Interrupted(SagoError):
    """The user interrupted (Ctrl-C); what was finished is kept. The CLI exits with 130."""


def raise_if_interrupted(exc: BaseException) -> None:
    """Re-raise Ctrl-C that a library wrapped into another error.

    A SIGINT that lands while a compiled extension initialises (ONNX Runtime's pybind11 module, Numba) comes
    back as ``ImportError: initialization failed`` with the ``KeyboardInterrupt`` as its cause; a unit that
    catches ``Exception`` would record it as a failed unit instead of stopping the run.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        seen.add(id(current))
        current = current.__cause__ or current.__context__
