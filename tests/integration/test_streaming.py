"""A unit streams: chunked results equal the whole unit's, chunks are committed as they go, a SIGKILL
mid-unit keeps them and the re-run finishes the unit as an uninterrupted run would."""

from __future__ import annotations

import sys

import duckdb
import numpy as np
import pytest

from sago_fast.datasets.load import load_dataset
from sago_fast.kernels import linear_cka
from sago_fast.runtime.batching import BatchPolicy
from sago_fast.units.chunk import model_variant_bytes, plan_chunks
from sago_fast.units.driver import evaluate_unit
from sago_fast.units.stream_settings import StreamSettings
from sago_fast.units.unit_records import ModelFacts
from sago_fast.variants import VariantConfig, generate_variants

pytestmark = pytest.mark.xdist_group("streaming")  # module fixtures: built once, in one process

FAMILIES = ("typo", "option_permutation", "wrong_hint", "casing")
KEYS = {
    "outputs": ("example_id", "variant_id", "replicate"),
    "mode_answers": ("example_id", "variant_id", "replicate", "answer_mode"),
    "item_scores": ("example_id", "axis", "metric", "family"),
    "layer_scores": ("example_id", "layer", "pooling", "metric", "family"),
    "dataset_scores": ("axis", "metric", "family", "layer", "pooling"),
}
ACCUMULATED = {"dispersion", "between_example_distance", "ece", "ece_spread"}  # sums in another order


def keyed(columns, key, value):
    return {tuple(columns[k][i] for k in key): columns[value][i] for i in range(len(columns[value]))}


@pytest.fixture(scope="module")
def unit(checkpoints, cache_dir):
    """One model answering every prompt alone (batch shape never changes a float) and 14 examples."""
    import sago_fast

    model = sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir)
    model.engine.batch_policy = BatchPolicy(token_budget=model.batch_policy.token_budget, max_batch=1)
    data = load_dataset("capitals", limit=14)
    variants = generate_variants(data.examples, VariantConfig(families=FAMILIES, k=1))
    yield model, data, variants
    model.close()


def test_streaming_equals_the_whole_unit(unit):
    model, data, variants = unit
    per_variant = model_variant_bytes(ModelFacts.of(model))
    small = StreamSettings(chunk_memory_mb=0.2)
    chunk_variants = small.chunk_bytes // per_variant
    n_chunks = len(plan_chunks(variants, small.chunk_bytes, per_variant))
    assert n_chunks >= 3, (chunk_variants, len(variants))  # really chunked
    whole = evaluate_unit(model, data, variants, stream=StreamSettings(chunk_memory_mb=100_000))
    chunked = evaluate_unit(model, data, variants, stream=small)
    assert whole.accuracy == chunked.accuracy
    for table, key in KEYS.items():
        value = "p_gold" if table in ("outputs", "mode_answers") else "value"
        a = keyed(whole.table(table), key, value)
        b = keyed(chunked.table(table), key, value)
        assert a.keys() == b.keys() and a, table
        metric_at = key.index("metric") if "metric" in key else None
        for k, x in a.items():
            if metric_at is not None and k[metric_at] in ACCUMULATED:
                assert b[k] == pytest.approx(x, rel=1e-9, abs=1e-12, nan_ok=True), (table, k)
            else:  # item metrics, per-example layer metrics, kNN and CKA: exactly
                assert (x == b[k]) or (x != x and b[k] != b[k]), (table, k)


def test_neighbourhood_metrics_sample_examples_beyond_the_budget(unit):
    model, data, variants = unit
    # activations: 3 layers x 32 d x 4 B x 2 poolings x 5 variants = 3.8 kB an example; 1 MB keeps them all
    exact = evaluate_unit(model, data, variants, stream=StreamSettings(sample_memory_mb=1))
    assert exact.table("unit_estimators")["estimator"] == ["exact", "exact"]
    from sago_fast.units.chunk import seeded_sample

    size = 9
    sample = seeded_sample([e.example_id for e in data.examples], size, 0)
    import sago_fast.units.chunk as evaluate

    original = evaluate.sample_size
    evaluate.sample_size = lambda per_example, budget: size  # as if the budget held 9 examples
    try:
        sampled = evaluate_unit(model, data, variants)
    finally:
        evaluate.sample_size = original
    estimators = sampled.table("unit_estimators")
    assert estimators["estimator"] == ["sample", "sample"]
    assert estimators["sample_size"] == [size, size] and estimators["population"] == [14, 14]
    layers = sampled.table("layer_scores")
    knn = {e for e, m in zip(layers["example_id"], layers["metric"], strict=True) if m == "knn_instability"}
    assert knn == sample
    # CKA over the sample, against the reference on those examples' canonical and first typo variants
    probe_ids = sorted(sample)
    rows = {v.variant_id: i for i, v in enumerate(variants)}
    canonical = [rows[f"{e}/canonical/0"] for e in probe_ids]
    typo = [rows[f"{e}/typo/0"] for e in probe_ids]
    probe = model.probe([variants[i].prompt for i in canonical + typo])
    last = probe.hidden_mean.shape[0] - 1
    expected = linear_cka(
        probe.hidden_mean[last, : len(probe_ids)], probe.hidden_mean[last, len(probe_ids) :]
    )
    datasets = sampled.table("dataset_scores")
    got = [
        v
        for m, f, layer, p, v in zip(
            datasets["metric"],
            datasets["family"],
            datasets["layer"],
            datasets["pooling"],
            datasets["value"],
            strict=True,
        )
        if (m, f, layer, p) == ("cka", "typo", last, "mean")
    ]
    assert got == [pytest.approx(expected, rel=1e-4)]


def sago(*args: str) -> list[str]:
    return [sys.executable, "-m", "sago_fast.cli.app", *args]


def table_rows(db, sql):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_sigkill_mid_unit_keeps_its_chunks_and_the_rerun_equals_an_uninterrupted_run(
    tmp_path, checkpoints, cache_dir, caplog
):
    from sago_fast.run import RunConfig, run
    from tests.integration.test_units import assert_same_tables, sigkill_at

    settings = dict(
        models=(str(checkpoints["gpt2"]),),
        datasets=("letters",),
        limit=60,
        families=("typo",),
        variants_per_family=1,
        stats=False,
        chunk_memory_mb=0.1,
        cache_dir=cache_dir,
    )
    reference = tmp_path / "reference.duckdb"
    run(RunConfig(db=reference, **settings), progress=False)
    n_chunks = table_rows(reference, "SELECT n_chunks FROM units")[0][0]
    assert n_chunks >= 4
    killed = tmp_path / "killed.duckdb"
    args = ["run", "-m", settings["models"][0], "-d", "letters", "--limit", "60", "-F", "typo", "-k", "1"]
    args += ["--no-stats", "--chunk-memory-mb", "0.1", "--cache-dir", str(cache_dir), "--db", str(killed)]
    sigkill_at(sago(*args), "examples committed")  # the first chunk is in: kill mid-unit
    ((chunks, units),) = table_rows(
        killed, "SELECT (SELECT count(*) FROM unit_chunks), (SELECT count(*) FROM units)"
    )
    assert units == 0 and 1 <= chunks < n_chunks  # killed mid-unit, the committed chunks kept
    (partial,) = table_rows(killed, "SELECT examples_done, n_examples, done FROM unit_progress")
    assert partial[1] == 60 and 0 < partial[0] < 60 and partial[2] is False
    with caplog.at_level("INFO", logger="sago_fast.run.pipeline"):
        result = run(RunConfig(db=killed, **settings), progress=False)
    assert len(result.units) == 1
    assert f"resuming after {chunks} committed chunks" in caplog.text
    assert_same_tables(killed, reference)
    assert table_rows(killed, "SELECT count(*), count(state) FROM unit_chunks") == [(n_chunks, 0)]
    same = "SELECT chunk, example_ids, n_variants, n_canonical_correct FROM unit_chunks ORDER BY chunk"
    assert table_rows(killed, same) == table_rows(reference, same)


def test_between_example_distance_matches_the_canonical_vectors(unit):
    """The dataset scorer's between-example distance against scipy on the probed canonical vectors."""
    from scipy.spatial.distance import pdist

    model, data, variants = unit
    tables = evaluate_unit(model, data, variants, stream=StreamSettings(chunk_memory_mb=0.2))
    canonical = [v.prompt for v in variants if v.is_canonical]
    probe = model.probe(canonical)
    d = tables.table("dataset_scores")
    got = {
        (layer, pooling): v
        for m, layer, pooling, v in zip(d["metric"], d["layer"], d["pooling"], d["value"], strict=True)
        if m == "between_example_distance"
    }
    for layer in range(probe.hidden_mean.shape[0]):
        expected = pdist(probe.hidden_mean[layer].astype(np.float64), "cosine").mean()
        assert got[(layer, "mean")] == pytest.approx(expected, rel=1e-4)
