"""DuckDB results store: numbered migrations, set-based inserts, parameterised queries."""

from sago_fast.store.store import SCHEMA_VERSION, Store

__all__ = ["SCHEMA_VERSION", "Store"]
