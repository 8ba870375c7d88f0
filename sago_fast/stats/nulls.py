"""What each item metric is tested against (the null of ``model_scores.p_value``).

replicate  continuous axes: per example, the metric's value between the two runs of the canonical prompt
           (replicate 1 re-runs it alone: other batch composition and padding); one-sided Wilcoxon
           signed-rank of (value - replicate value) > 0 over examples
tolerance  discrete axes: one-sided Wilcoxon of (value - tolerance) beyond the stated tolerance
chance     position_mirroring: (value - position_chance) > 0, paired per example
none       estimate and CI only (correctness, normalised scores, log-odds)
"""

from __future__ import annotations

from dataclasses import dataclass

from sago_fast.registry import Registry


@dataclass(frozen=True)
class NullSpec:
    kind: str  # replicate | tolerance | chance | none
    alternative: str = "greater"  # the direction of instability
    tolerance: float | None = None  # None: StatsConfig.tolerance; a number: fixed for this metric


NULLS: Registry[NullSpec] = Registry("null hypothesis")
for _metric in ("dispersion_raw", "option_js", "p_gold_sd", "p_gold_range"):
    NULLS.add(_metric, NullSpec("replicate"))
for _metric in (
    "answer_disagreement",
    "correctness_flip",
    "flip_rate",
    "token_f1_disagreement",
    "margin_flip",
    "knn_instability",
    "prompt_echo",
):
    NULLS.add(_metric, NullSpec("tolerance"))
# float noise between two ORT runs of one prompt is < 1e-6 in log-prob; JS is far below this bound
NULLS.add("next_token_js", NullSpec("tolerance", tolerance=1e-4))
NULLS.add("cue_following", NullSpec("tolerance", tolerance=0.0))
NULLS.add("swap_consistency", NullSpec("tolerance", alternative="less"))  # consistency < 1 - tolerance
NULLS.add("position_mirroring", NullSpec("chance"))


def null_for(metric: str) -> NullSpec:
    return NULLS.get(metric) if metric in NULLS.names() else NullSpec("none")
