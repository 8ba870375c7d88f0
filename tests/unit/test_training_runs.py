"""Training-run folders (layouts, steps, tokens seen, broken members), checkpoint_changes by hand, and the
quantization_comparisons view on hand-written rows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from sago_fast.checkpoints.entries import model_entries
from sago_fast.checkpoints.runs import run_members, step_from_name, training_position
from sago_fast.errors import CheckpointError
from sago_fast.run.config import RunConfig
from sago_fast.run.plan import plan_run
from sago_fast.stats.changes import IDENTICAL, checkpoint_changes, training_runs
from sago_fast.store import Store


@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("checkpoint-500", 500),
        ("step-00150", 150),
        ("step_20", 20),
        ("global_step1200", 1200),
        ("global_step_7", 7),
        ("iter_0001000", 1000),
        ("iter-3", 3),
        ("Checkpoint-9", 9),
        ("final", None),
        ("checkpoint-best", None),
        ("runs", None),
    ],
)
def test_member_names(name, step):
    assert step_from_name(name) == step


def _member(root: Path, name: str, source: Path, state: dict | None = None) -> Path:
    shutil.copytree(source, root / name)
    if state is not None:
        (root / name / "trainer_state.json").write_text(json.dumps(state), encoding="utf-8")
    return root / name


def test_a_run_folder_expands_in_step_order_with_the_trainer_state(tmp_path, checkpoints):
    root = tmp_path / "run"
    source = checkpoints["llama"]
    _member(root, "checkpoint-1000", source, {"global_step": 1000, "num_input_tokens_seen": 64000})
    _member(root, "checkpoint-500", source, {"global_step": 500, "num_input_tokens_seen": 0})
    _member(root, "checkpoint-90", source, {"global_step": 95})  # the state's step wins over the name
    (root / "logs").mkdir()  # not a member
    (root / "checkpoint-77.tmp").mkdir()  # not a member name
    members = run_members(root)
    assert [p.name for p in members] == ["checkpoint-90", "checkpoint-500", "checkpoint-1000"]
    positions = [training_position(p) for p in members]
    assert [(p.step, p.tokens_seen) for p in positions] == [(95, None), (500, None), (1000, 64000)]
    assert {p.training_run for p in positions} == {str(root.resolve())}
    assert run_members(members[0]) is None  # a checkpoint is not a run
    assert run_members(tmp_path / "absent") is None
    entries = model_entries([str(root)])
    assert [Path(e.text).name for e in entries] == [p.name for p in members] and all(
        e.in_run for e in entries
    )
    globbed = model_entries([str(tmp_path / "ru*")])  # a glob matching the run folder: its members
    assert [Path(e.text).name for e in globbed] == [p.name for p in members]


def test_identical_members_are_one_unit_and_a_broken_member_is_skipped(tmp_path, checkpoints, caplog):
    root = tmp_path / "run"
    for step in (1, 2, 3):
        _member(root, f"step_{step}", checkpoints["llama" if step < 3 else "qwen2"])
    missing = _member(root, "step_4", checkpoints["llama"])
    (missing / "config.json").unlink()
    truncated = _member(root, "step_5", checkpoints["qwen2"])
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    config = RunConfig(models=(str(root),), datasets=("comparison",), db=tmp_path / "r.duckdb", limit=2)
    with caplog.at_level("ERROR"):
        plan = plan_run(config)
    assert [(Path(a).name, "config.json" in why or "truncated" in why) for a, why in plan.skipped] == [
        ("step_4", True),
        ("step_5", True),
    ]
    assert sum("skipped training-run member" in r.message for r in caplog.records) == 2
    assert len(plan.units) == 2
    first = plan.units[0]
    assert [a.display_path.name for a in first.aliases] == ["step_1", "step_2"]
    assert [a.position.step for a in first.aliases] == [1, 2]
    with pytest.raises(CheckpointError, match="truncated"):  # named on its own, it stops the run
        plan_run(RunConfig(models=(str(truncated),), datasets=("comparison",), db=tmp_path / "r.duckdb"))


def _comparisons(rows):
    keys = ("dataset_id", "axis", "metric", "model_a", "model_b", "test", "mean_a", "mean_b", "difference")
    keys += ("ci_low", "ci_high", "p_value", "n_items")
    return {k: [r[i] for r in rows] for i, k in enumerate(keys)}


def test_checkpoint_changes_by_hand():
    """Later minus earlier whichever way the pair was compared; identical weights: 0, untested; BH over
    the consecutive comparisons only (not over every pair of model_comparisons)."""
    runs = training_runs(
        [("A", "run", 100), ("B", "run", 200), ("B", "run", 300), ("C", "run", 400), ("X", "other", 5)]
    )
    assert runs == {"run": [(100, "A"), (200, "B"), (300, "B"), (400, "C")]}  # one checkpoint: no run
    comparisons = _comparisons(
        [
            ("d", "accuracy", "accuracy", "A", "B", "mcnemar", 0.5, 0.75, -0.25, -0.5, 0.0, 0.004, 20),
            ("d", "accuracy", "accuracy", "C", "B", "mcnemar", 0.6, 0.75, -0.15, -0.3, 0.05, 0.03, 20),
            (
                "d",
                "accuracy",
                "accuracy",
                "A",
                "C",
                "mcnemar",
                0.5,
                0.6,
                -0.1,
                -0.2,
                0.1,
                0.2,
                20,
            ),  # not consecutive
        ]
    )
    out = checkpoint_changes("r", runs, {"d": [("accuracy", "accuracy", None)]}, comparisons, alpha=0.05)
    assert out["step_from"] == [100, 200, 300] and out["step_to"] == [200, 300, 400]
    assert out["change"] == [0.25, 0.0, -0.15]
    assert out["ci_low"] == [0.0, 0.0, -0.3] and out["ci_high"] == [0.5, 0.0, 0.05]
    assert out["mean_from"] == [0.5, None, 0.75] and out["mean_to"] == [0.75, None, 0.6]
    assert out["test"] == ["mcnemar", IDENTICAL, "mcnemar"]
    expected = stats.false_discovery_control([0.004, 0.03], method="bh")
    np.testing.assert_allclose([out["p_adjusted"][0], out["p_adjusted"][2]], expected)
    assert out["p_adjusted"][1] is None
    assert out["significant"] == [True, False, True]


def test_changes_of_pairs_compared_until_separated_are_significant_when_their_sequence_excludes_0():
    """The units stopped on these differences: the paired sequence is the CI, no p-value, and the change is
    significant exactly when the sequence excludes 0 (whatever BH does with the fixed-n p-values)."""
    from sago_fast.stats.confidence_sequences import SEPARATION_TEST

    runs = training_runs([("A", "run", 1), ("B", "run", 2), ("C", "run", 3), ("D", "run", 4)])
    comparisons = _comparisons(
        [
            ("d", "accuracy", "accuracy", "B", "A", SEPARATION_TEST, 0.7, 0.3, 0.4, 0.1, 0.6, None, 40),
            ("d", "accuracy", "accuracy", "B", "C", SEPARATION_TEST, 0.7, 0.68, 0.02, -0.1, 0.15, None, 40),
            ("d", "accuracy", "accuracy", "C", "D", "mcnemar", 0.68, 0.5, 0.18, 0.02, 0.3, 0.01, 40),
        ]
    )
    out = checkpoint_changes("r", runs, {"d": [("accuracy", "accuracy", None)]}, comparisons, alpha=0.05)
    assert out["test"] == [SEPARATION_TEST, SEPARATION_TEST, "mcnemar"]
    assert out["change"] == pytest.approx([0.4, -0.02, -0.18])
    assert out["ci_low"] == pytest.approx([0.1, -0.15, -0.3]) and out["p_value"][:2] == [None, None]
    assert out["significant"] == [True, False, True]


def test_quantization_comparisons_pair_each_quantisation_with_its_graphs_best(tmp_path):
    """Q4_1 and Q8_0 of one graph beside its full-precision model, and a model of another graph."""
    models = [  # model_id, checkpoint, graph_key, quantization, base_model_id
        ("fp", "m.safetensors", "g", None, None),
        ("q4", "m.Q4_1.gguf", "g", "Q4_1", None),
        ("q8", "m.Q8_0.gguf", "g", "Q8_0", None),
        ("other", "o.Q4_0.gguf", "h", "Q4_0", None),
        ("adapter", "lora", "g", None, "fp"),
    ]
    with Store(tmp_path / "q.duckdb") as store:
        store.insert(
            "models",
            {
                k: [m[i] for m in models]
                for i, k in enumerate(
                    ("model_id", "checkpoint", "graph_key", "quantization", "base_model_id")
                )
            },
        )
        rows = [  # model_a, model_b, mean_a, mean_b, difference, ci_low, ci_high
            ("fp", "q4", 0.8, 0.7, 0.1, 0.02, 0.2),
            ("q8", "fp", 0.78, 0.8, -0.02, -0.05, 0.01),
            ("q4", "q8", 0.7, 0.78, -0.08, -0.1, -0.01),
        ]
        store.insert(
            "model_comparisons",
            {
                "run_id": ["r"] * 3,
                "dataset_id": ["d"] * 3,
                "axis": ["accuracy"] * 3,
                "metric": ["accuracy"] * 3,
                "model_a": [r[0] for r in rows],
                "model_b": [r[1] for r in rows],
                "mean_a": [r[2] for r in rows],
                "mean_b": [r[3] for r in rows],
                "difference": [r[4] for r in rows],
                "ci_low": [r[5] for r in rows],
                "ci_high": [r[6] for r in rows],
            },
        )
        _, got = store.query(
            "SELECT quantized, reference, reference_type, quantized_mean, reference_mean, difference, ci_low, "
            "ci_high FROM quantization_comparisons ORDER BY quantized"
        )
    assert got == [
        ("q4", "fp", "full precision", 0.7, 0.8, -0.1, -0.2, -0.02),
        ("q8", "fp", "full precision", 0.78, 0.8, -0.02, -0.05, 0.01),
    ]
