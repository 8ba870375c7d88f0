"""The settings of the statistics (no scipy import: the CLI reads its defaults from here)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from sago_fast.errors import InputError


@dataclass(frozen=True)
class StatsConfig:
    """n_resamples: bootstrap draws (and permutations); seed: every random stream derives from it;
    confidence: CI level; alpha: significance level for reversals and tables; tolerance: the stated
    tolerance discrete instability metrics are tested against (share of pairs / variants); sesoi:
    (metric, value) pairs overriding the catalogue's smallest effect of practical interest of replicate
    nulls (``sago stats --sesoi option_js=0.01``); all_pairs: compare every pair of models, however many
    (default: every pair up to 12 models, above that a training run's consecutive checkpoints and the
    pairs among the other models and each run's last checkpoint: ``compute.compared_pairs``)."""

    n_resamples: int = 2000
    seed: int = 0
    confidence: float = 0.95
    alpha: float = 0.05
    tolerance: float = 0.05
    sesoi: tuple[tuple[str, float], ...] = ()
    all_pairs: bool = False

    def __post_init__(self) -> None:
        if any(value < 0 for _, value in self.sesoi):
            raise InputError("a smallest effect of practical interest (--sesoi) must be >= 0")
        if self.n_resamples < 100:
            raise InputError(f"--resamples (n_resamples) must be at least 100, not {self.n_resamples}")
        for flag, value in (("confidence", self.confidence), ("alpha", self.alpha)):
            if not 0 < value < 1:
                raise InputError(f"--{flag} ({flag}) must lie strictly between 0 and 1, not {value:g}")
        if not 0 <= self.tolerance < 1:
            raise InputError(
                f"--tolerance (tolerance) must be a share from 0 to below 1, not {self.tolerance:g}"
            )
        level = min(1.0 - self.confidence, self.alpha)
        least = math.ceil(2.0 / level)  # a resampled two-sided p is at least 1 / (B + 1): B + 1 >= 2 / level
        if self.n_resamples + 1 < least:
            raise InputError(
                f"--resamples {self.n_resamples} is too few for a {self.confidence:.4g} interval and alpha "
                f"{self.alpha:.4g}: at least {least - 1} (a resampled p-value is never below 1 / (B + 1))"
            )


def sesoi_for(config: StatsConfig, metric: str, default: float | None) -> float:
    """The smallest effect of practical interest of ``metric``: the override, else the catalogue's."""
    return dict(config.sesoi).get(metric, default if default is not None else 0.0)
