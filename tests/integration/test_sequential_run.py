"""Sequential units (``sago run --precision / --budget``): they stop when the followed metrics' confidence
sequences are narrow enough, store why and the bounds, resume to the same stopping point, and the
statistics and report use the sequences."""

from __future__ import annotations

import duckdb
import pytest

from sago_fast.run import RunConfig, run
from tests.integration.test_streaming import table_rows as rows
from tests.integration.test_units import sago_cmd, sigkill_at

pytestmark = pytest.mark.xdist_group("sequential_run")  # module fixtures: built once, in one process

PRECISION = 0.3
LIMIT = 120
# each followed metric's final sequence (attached as ``seq``) beside the full run's mean (main)
FINAL_AND_FULL = """
    WITH last AS (SELECT * FROM seq.confidence_sequences
                  WHERE chunk = (SELECT max(chunk) FROM seq.confidence_sequences)),
    full_means AS (
        SELECT 'accuracy' AS metric, avg(o.correct::DOUBLE) AS mean FROM outputs o JOIN variants v
          USING (dataset_id, variant_id) WHERE v.is_canonical AND o.replicate = 0
        UNION ALL
        SELECT metric, avg(value) FROM item_scores
        WHERE (metric IN ('flip_rate', 'answer_disagreement', 'dispersion_raw', 'option_js') AND family IS NULL)
           OR (metric = 'position_mirroring' AND family = 'option_permutation')
        GROUP BY metric)
    SELECT l.metric, f.mean, l.lower, l.upper, l.half_width FROM last l JOIN full_means f USING (metric)
"""


@pytest.fixture(scope="module")
def settings(checkpoints, cache_dir):
    return dict(
        models=(str(checkpoints["gpt2"]),),
        datasets=("capitals",),
        limit=LIMIT,
        families=("typo", "option_permutation"),
        variants_per_family=1,
        stats=False,
        chunk_memory_mb=0.1,
        cache_dir=cache_dir,
    )


@pytest.fixture(scope="module")
def sequential(settings, tmp_path_factory):
    db = tmp_path_factory.mktemp("sequential") / "sequential.duckdb"
    run(RunConfig(db=db, precision=PRECISION, **{**settings, "stats": True}), progress=False)
    return db


def test_a_sequential_unit_stops_once_every_followed_sequence_is_narrow_enough(sequential):
    ((reason, used, available, n_chunks),) = rows(
        sequential, "SELECT stop_reason, n_examples, examples_available, n_chunks FROM units"
    )
    assert reason == "precision" and used < available == LIMIT
    last = rows(
        sequential,
        "SELECT metric, n_examples, half_width, lower, estimate, upper FROM confidence_sequences "
        "WHERE chunk = (SELECT max(chunk) FROM confidence_sequences) ORDER BY metric",
    )
    metrics = {r[0] for r in last}
    assert {"accuracy", "flip_rate", "answer_disagreement", "dispersion_raw", "option_js"} <= metrics
    for metric, n, half_width, lower, estimate, upper in last:
        assert n == used and half_width <= PRECISION and lower <= estimate <= upper, metric
    # it did not stop a chunk later than it had to: before the last chunk some sequence was wider
    before = rows(
        sequential,
        "SELECT max(half_width) FROM confidence_sequences WHERE chunk = "
        "(SELECT max(chunk) - 1 FROM confidence_sequences)",
    )
    assert n_chunks == 1 or before[0][0] > PRECISION
    # the examples it used are the first of the seeded visiting order, whole
    (ids,) = rows(sequential, "SELECT flatten(list(example_ids ORDER BY chunk)) FROM unit_chunks")[0]
    assert len(ids) == used == len(set(ids))
    assert rows(sequential, "SELECT count(DISTINCT example_id) FROM outputs") == [(used,)]


def test_the_full_runs_estimates_lie_inside_the_final_sequences(sequential, settings, tmp_path):
    full = tmp_path / "full.duckdb"
    run(RunConfig(db=full, **settings), progress=False)
    con = duckdb.connect(str(full), read_only=True)
    con.execute(f"ATTACH '{sequential}' AS seq (READ_ONLY)")
    checked = con.execute(FINAL_AND_FULL).fetchall()
    con.close()
    assert len(checked) >= 5
    for metric, mean, lower, upper, _ in checked:
        assert lower <= mean <= upper, (metric, mean, lower, upper)


def test_stats_use_the_sequences_of_a_sequential_unit(sequential):
    scores = rows(
        sequential,
        "SELECT s.metric, s.ci_low, s.ci_high, s.p_value, s.test, c.lower, c.upper "
        "FROM model_scores s JOIN confidence_sequences c USING (model_id, dataset_id, metric) "
        "WHERE c.chunk = (SELECT max(chunk) FROM confidence_sequences) "
        "AND s.family IS NOT DISTINCT FROM (CASE WHEN s.metric = 'position_mirroring' THEN 'option_permutation' END)",
    )
    assert {r[0] for r in scores} >= {"accuracy", "flip_rate", "option_js"}
    for metric, low, high, p, test, lower, upper in scores:
        assert (low, high, p) == (lower, upper, None) and "anytime-valid" in test, metric
    other = rows(
        sequential, "SELECT count(*) FROM model_scores WHERE metric = 'p_gold_sd' AND p_value IS NOT NULL"
    )
    assert other[0][0] >= 1  # metrics it did not follow keep their fixed-n tests


def test_an_interrupted_sequential_unit_resumes_to_the_same_stopping_point(
    sequential, settings, cache_dir, tmp_path
):
    killed = tmp_path / "killed.duckdb"
    args = ["run", "-m", settings["models"][0], "-d", "capitals", "--limit", str(LIMIT), "-F", "typo"]
    args += ["-F", "option_permutation", "-k", "1", "--no-stats", "--chunk-memory-mb", "0.1"]
    args += ["--precision", str(PRECISION), "--cache-dir", str(cache_dir), "--db", str(killed)]
    sigkill_at(sago_cmd(*args), "examples committed")  # the first chunk is in: kill mid-unit
    assert rows(killed, "SELECT count(*) FROM units") == [(0,)]
    run(RunConfig(db=killed, precision=PRECISION, **settings), progress=False)
    same = (
        "SELECT u.stop_reason, u.n_examples, c.chunk, c.example_ids FROM units u JOIN unit_chunks c USING (unit_id) "
        "ORDER BY c.chunk"
    )
    assert rows(killed, same) == rows(sequential, same)
    bounds = "SELECT chunk, metric, n_values, lower, upper FROM confidence_sequences ORDER BY chunk, metric"
    assert rows(killed, bounds) == rows(sequential, bounds)


def test_a_budget_visits_the_same_examples_for_every_model(checkpoints, settings, tmp_path):
    db = tmp_path / "budget.duckdb"
    models = (str(checkpoints["gpt2"]), str(checkpoints["llama"]))
    run(RunConfig(db=db, budget=10, **{**settings, "models": models}), progress=False)
    units = rows(db, "SELECT stop_reason, n_examples, examples_available FROM units")
    assert units == [("budget", 10, LIMIT)] * 2
    per_model = rows(
        db, "SELECT model_id, list(DISTINCT example_id ORDER BY example_id) FROM outputs GROUP BY 1"
    )
    assert len(per_model) == 2 and per_model[0][1] == per_model[1][1]


def test_precision_and_budget_are_checked_first(settings):
    from sago_fast.errors import InputError

    with pytest.raises(InputError, match="--precision"):
        RunConfig(db="x.duckdb", precision=0, **settings)
    with pytest.raises(InputError, match="--budget"):
        RunConfig(db="x.duckdb", budget=0, **settings)
