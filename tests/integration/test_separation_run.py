"""``sago run --until-separated``: the models advance together, each unit stops once its comparison with
its neighbour is settled, the paired sequences are stored, shown by ``sago stats``, and an interrupted run
resumes to the same stopping points."""

from __future__ import annotations

import pytest

from sago_fast.errors import InputError
from sago_fast.run import RunConfig, run
from tests.integration.test_streaming import table_rows as rows
from tests.integration.test_units import sago_cmd, sigkill_at

pytestmark = pytest.mark.xdist_group("separation_run")  # module fixtures: built once, in one process

PRECISION = 0.3
LIMIT = 120
UNITS = "SELECT model_id, stop_reason, n_examples, examples_available FROM units ORDER BY model_id"
FINAL = """
    SELECT metric, n_examples, n_values, difference, lower, upper, half_width, sign, settled
    FROM comparison_sequences
    QUALIFY row_number() OVER (PARTITION BY metric ORDER BY n_examples DESC) = 1
    ORDER BY metric
"""


@pytest.fixture(scope="module")
def settings(checkpoints, cache_dir):
    return dict(
        models=(str(checkpoints["gpt2"]), str(checkpoints["llama"])),
        datasets=("capitals",),
        limit=LIMIT,
        families=("option_permutation",),
        variants_per_family=1,
        stats=False,
        chunk_memory_mb=0.1,
        cache_dir=cache_dir,
        precision=PRECISION,
        until_separated=True,
    )


@pytest.fixture(scope="module")
def separated(settings, tmp_path_factory):
    db = tmp_path_factory.mktemp("separated") / "separated.duckdb"
    run(RunConfig(db=db, **{**settings, "stats": True}), progress=False)
    return db


def test_both_units_stop_together_once_every_followed_difference_is_settled(separated):
    units = rows(separated, UNITS)
    print(units)
    assert [u[1] for u in units] == ["separated", "separated"]
    assert units[0][2] == units[1][2] < LIMIT  # the same examples, fewer than all
    final = rows(separated, FINAL)
    print(final)
    assert {"accuracy", "flip_rate", "answer_disagreement", "dispersion_raw", "option_js"} <= {
        f[0] for f in final
    }
    for metric, n, n_values, difference, lower, upper, half_width, sign, settled in final:
        assert n == units[0][2] and 0 < n_values <= n, metric
        assert lower <= difference <= upper, metric
        assert settled and (sign != 0 or half_width <= PRECISION), metric
        assert sign == (1 if lower > 0 else -1 if upper < 0 else 0), metric
    # the accuracy difference is the paired mean over the examples both used (model_b - model_a)
    (a, b) = rows(separated, "SELECT any_value(model_a), any_value(model_b) FROM comparison_sequences")[0]
    canonical = rows(
        separated,
        "SELECT o.model_id, avg(o.correct::DOUBLE) FROM outputs o JOIN variants v USING (dataset_id, variant_id) "
        "WHERE v.is_canonical AND o.replicate = 0 GROUP BY 1",
    )
    means = dict(canonical)
    accuracy = next(f for f in final if f[0] == "accuracy")
    assert accuracy[3] == pytest.approx(means[b] - means[a])
    # before the last chunk some comparison was still open: it did not stop later than it had to
    before = rows(
        separated,
        "SELECT bool_and(settled) FROM comparison_sequences WHERE n_examples = "
        "(SELECT max(n_examples) FROM comparison_sequences WHERE n_examples < (SELECT max(n_examples) FROM comparison_sequences))",
    )
    assert before[0][0] in (False, None)


def test_stats_use_the_paired_sequences_for_the_compared_pairs(separated):
    from sago_fast.stats.confidence_sequences import SEPARATION_TEST

    compared = rows(
        separated,
        """WITH last AS (SELECT * FROM comparison_sequences
                         QUALIFY row_number() OVER (PARTITION BY metric ORDER BY n_examples DESC) = 1)
        SELECT c.metric, c.test, c.p_value, c.ci_low, c.ci_high, c.difference,
               CASE WHEN c.model_a = l.model_b THEN l.lower ELSE -l.upper END,
               CASE WHEN c.model_a = l.model_b THEN l.upper ELSE -l.lower END
        FROM model_comparisons c JOIN last l USING (dataset_id, metric)""",
    )
    assert {r[0] for r in compared} >= {"accuracy", "answer_disagreement", "option_js"}
    for metric, test, p, low, high, difference, lower, upper in compared:
        # model_comparisons' a - b, from the stored b - a in whichever direction the pair was stored
        assert test == SEPARATION_TEST and p is None, metric
        assert (low, high) == pytest.approx((lower, upper)) and low <= difference <= high, metric
    fixed = rows(separated, "SELECT test, p_value FROM model_comparisons WHERE metric = 'dispersion'")
    assert len(fixed) == 1 and fixed[0][0] != SEPARATION_TEST and fixed[0][1] is not None  # not followed


def test_stats_and_the_report_show_the_comparisons(separated, tmp_path):
    from typer.testing import CliRunner

    from sago_fast.cli.app import app
    from sago_fast.report import write_report

    result = CliRunner().invoke(app, ["stats", "--db", str(separated)])
    assert result.exit_code == 0, result.output
    assert "comparisons of neighbouring models" in result.output and "accuracy" in result.output
    html = tmp_path / "report.html"
    write_report(separated, html)
    assert "Comparisons of neighbouring models" in html.read_text()


def test_an_interrupted_lockstep_run_resumes_to_the_same_stopping_points(separated, settings, tmp_path):
    killed = tmp_path / "killed.duckdb"
    args = ["-v", "run", "-d", "capitals", "--limit", str(LIMIT), "-F", "option_permutation"]
    args += ["-k", "1", "--no-stats", "--chunk-memory-mb", "0.1", "--precision", str(PRECISION)]
    args += ["--until-separated", "--cache-dir", str(settings["cache_dir"]), "--db", str(killed)]
    for model in settings["models"]:
        args += ["-m", model]
    sigkill_at(sago_cmd(*args), "paired examples", times=3)  # both models have chunks in: kill mid-run
    assert rows(killed, "SELECT count(*) FROM units") == [(0,)]
    assert rows(killed, "SELECT count(DISTINCT model_id) FROM unit_chunks") == [(2,)]  # both had begun
    run(RunConfig(db=killed, **settings), progress=False)
    assert rows(killed, UNITS) == rows(separated, UNITS)
    chunks = "SELECT model_id, chunk, example_ids FROM unit_chunks ORDER BY 1, 2"
    assert rows(killed, chunks) == rows(separated, chunks)
    final, again = rows(separated, FINAL), rows(killed, FINAL)
    grid = [
        (m, n, n_values, lower, upper, sign, settled)
        for m, n, n_values, _, lower, upper, _, sign, settled in final
    ]
    assert [
        (m, n, n_values, lower, upper, sign, settled)
        for m, n, n_values, _, lower, upper, _, sign, settled in again
    ] == grid
    assert [r[3] for r in again] == pytest.approx([r[3] for r in final])


def test_until_separated_is_checked_first(settings, checkpoints, tmp_path):
    with pytest.raises(InputError, match="needs --precision"):
        RunConfig(db=tmp_path / "x.duckdb", **{**settings, "precision": None})
    with pytest.raises(InputError, match="local executor"):
        RunConfig(db=tmp_path / "x.duckdb", **{**settings, "executor": "ray"})
    with pytest.raises(InputError, match="at least two models"):
        run(
            RunConfig(db=tmp_path / "x.duckdb", **{**settings, "models": settings["models"][:1]}),
            progress=False,
        )
    assert not (tmp_path / "x.duckdb").exists()  # refused before the results file is opened
