"""A sampled design run end to end on a tiny checkpoint: its cells are the replay's cells, its figures the
replay's (so the replay benchmark measures what a run does), its design is recorded and shown, and a resume
under another design is refused before anything is written."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sago_fast.errors import InputError
from sago_fast.run import RunConfig, run
from sago_fast.stats.replay import REPLAYED, replay_assignment, stored_items
from sago_fast.stats.settings import StatsConfig
from sago_fast.store import Store
from sago_fast.variants.design import drawn_families

pytestmark = pytest.mark.xdist_group("sampled_design")  # module fixtures: built once, in one process


@pytest.fixture(scope="module")
def runs(tmp_path_factory, checkpoints, cache_dir):
    """The same checkpoint and items under the full design and under --design sampled -m 3."""
    root = tmp_path_factory.mktemp("design")
    common = dict(
        models=(str(checkpoints["llama"]),),
        datasets=("arithmetic",),
        limit=30,
        variants_per_family=1,
        cache_dir=cache_dir,
        stats=False,
    )
    full = RunConfig(db=root / "full.duckdb", design="full", **common)
    sampled = RunConfig(db=root / "sampled.duckdb", design="sampled", families_per_item=3, **common)
    run(full, progress=False)
    run(sampled, progress=False)
    return full, sampled


def test_a_sampled_run_is_its_replay(runs):
    full, sampled = runs
    with Store(full.db, read_only=True) as store:
        run_id, model_id, dataset_id = store.query("SELECT run_id, model_id, dataset_id FROM units")[1][0]
        items = stored_items(store, run_id, model_id, dataset_id)
    replay = replay_assignment(items, 3, seed=sampled.seed, config=StatsConfig(n_resamples=100))
    drawn = drawn_families({i.outputs.example_id: i.families for i in items}, 3, sampled.seed)
    with Store(sampled.db, read_only=True) as store:
        cells = set(store.query("SELECT example_id, family FROM design_cells")[1])
        assert cells == {(e, f) for e, (families, _) in drawn.items() for f in families}
        assert {p for (p,) in store.query("SELECT DISTINCT inclusion FROM design_cells")[1]} == {0.3}
        _, units = store.query("SELECT design, families_per_item, n_variants FROM units")
        assert units == [("sampled", 3, 30 * (1 + 3 + 1))]  # canonical, 3 drawn families, the wrong hint
        assert store.query("SELECT DISTINCT n_cells FROM item_cells")[1] == [(3,)]
        for metric, family in REPLAYED:
            where = "family IS NULL" if family is None else "family = $family"
            _, rows = store.query(
                f"SELECT avg(value) FROM item_scores WHERE metric = $metric AND {where}",
                {"metric": metric} | ({} if family is None else {"family": family}),
            )
            # the same variants answered in other batches: floats within a tolerance
            assert rows[0][0] == pytest.approx(replay.estimates[(metric, family)][0], rel=1e-3, abs=1e-7)


def test_a_resume_under_another_design_is_refused_before_work(runs):
    _, sampled = runs
    before = sampled.db.stat().st_size
    again = RunConfig(
        models=sampled.models,
        datasets=sampled.datasets,
        limit=30,
        variants_per_family=1,
        cache_dir=sampled.cache_dir,
        db=sampled.db,
        stats=False,
        design="full",
    )
    with pytest.raises(
        InputError, match="under design sampled m=3; resuming it with full would mix its cells"
    ):
        run(again, progress=False)
    with Store(sampled.db, read_only=True) as store:
        assert store.query("SELECT count(*) FROM runs")[1] == [(1,)]
    assert sampled.db.stat().st_size == before


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--families-per-item", "0", "--design", "sampled"], "--families-per-item must be at least 1"),
        (
            ["--design", "sampled", "--families-per-item", "11"],
            "more than the 10 meaning-preserving families",
        ),
        (["--design", "halves"], "--design must be one of full, sampled"),
        (["--design", "full", "--families-per-item", "2"], "needs --design sampled"),
    ],
)
def test_bad_designs_exit_2_with_one_line_before_work(tmp_path, checkpoints, flags, message):
    db = tmp_path / "r.duckdb"
    cmd = [
        sys.executable,
        "-m",
        "sago_fast.cli.app",
        "run",
        "-m",
        str(checkpoints["llama"]),
        "-d",
        "arithmetic",
    ]
    done = subprocess.run([*cmd, "--db", str(db), *flags], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not db.exists()


def test_a_sequential_sampled_unit_stops_spending_cells_once_stability_is_known(
    tmp_path, checkpoints, cache_dir
):
    """--precision under a sampled design: every chunk after the one whose commit put every followed
    stability metric within the precision renders canonical prompts only, until accuracy is known too."""
    config = RunConfig(
        models=(str(checkpoints["llama"]),),
        datasets=("arithmetic",),
        limit=600,
        variants_per_family=1,
        design="sampled",
        families_per_item=2,
        precision=0.1,
        chunk_memory_mb=3,
        cache_dir=cache_dir,
        db=tmp_path / "r.duckdb",
        stats=False,
    )
    run(config, progress=False)
    with Store(config.db, read_only=True) as store:
        _, chunks = store.query("SELECT chunk, n_examples, n_variants FROM unit_chunks ORDER BY chunk")
        _, widths = store.query(
            """SELECT chunk, max(half_width) FILTER (WHERE metric <> 'accuracy'),
                      max(half_width) FILTER (WHERE metric = 'accuracy')
               FROM confidence_sequences GROUP BY chunk ORDER BY chunk"""
        )
    known = next(chunk for chunk, stability, _ in widths if stability <= 0.1)
    assert known < len(chunks) - 1, "stability was known before the unit stopped"
    for chunk, n_examples, n_variants in chunks:
        if chunk <= known:
            assert n_variants == n_examples * (1 + 2 + 1)  # canonical, 2 drawn families, the wrong hint
        else:
            assert n_variants == n_examples  # canonical renderings alone
    assert widths[-1][2] <= 0.1  # accuracy set the pace and stopped the unit
    with Store(config.db, read_only=True) as store:
        _, replicated = store.query(
            """SELECT c.chunk, count(o.example_id) FROM unit_chunks c, unnest(c.example_ids) AS e(example_id)
               LEFT JOIN outputs o ON o.example_id = e.example_id AND o.replicate = 1
               GROUP BY c.chunk ORDER BY c.chunk"""
        )
    # the replicate pass (the noise floor of instability) only where instability is measured
    assert [n > 0 for _, n in replicated] == [chunk <= known for chunk, _, _ in chunks]


def test_a_shard_folder_resumed_under_another_design_is_refused(tmp_path, checkpoints, cache_dir):
    common = dict(
        models=(str(checkpoints["llama"]),),
        datasets=("arithmetic",),
        limit=10,
        variants_per_family=1,
        cache_dir=cache_dir,
        shard="0/1",
        shard_dir=tmp_path / "shards",
        stats=False,
    )
    run(RunConfig(design="sampled", **common), progress=False)
    before = sorted(str(p) for p in (tmp_path / "shards").rglob("*"))
    with pytest.raises(
        InputError, match="under design sampled m=3; resuming it with full would mix its cells"
    ):
        run(RunConfig(design="full", **common), progress=False)
    assert sorted(str(p) for p in (tmp_path / "shards").rglob("*")) == before  # nothing written
