"""What the store knows about its rows: the keys of shared rows and the tables a unit writes."""

from __future__ import annotations

# Rows of these tables may already exist (another unit, another run): inserted only when absent.
ROW_KEYS: dict[str, tuple[str, ...]] = {
    "models": ("model_id", "export_key"),
    "datasets": ("dataset_id",),
    "examples": ("dataset_id", "example_id"),
    "variants": ("dataset_id", "variant_id"),
    "units": ("run_id", "unit_id"),
    "unit_chunks": ("run_id", "unit_id", "chunk"),
    "checkpoint_names": ("run_id", "model_id", "checkpoint"),
}

# What one unit writes besides its shared rows (always new: the unit id is part of the run's key).
RESULT_TABLES = (
    "outputs",
    "mode_answers",
    "item_scores",
    "layer_scores",
    "dataset_scores",
    "unit_estimators",
    "design_cells",
)
