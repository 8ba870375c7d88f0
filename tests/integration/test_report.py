"""`sago stats` / `sago report`: statistics stored by `sago run`, the HTML report in a real headless
Chromium (no console errors), labelled plots, empty and old-schema databases."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import duckdb
import pytest

from sago_fast.errors import StoreError
from sago_fast.report import write_report
from sago_fast.report.contents import load_report_data
from sago_fast.stats import run_stats
from sago_fast.store import Store
from sago_fast.store.migrations import MIGRATIONS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (`make test` installs Debian's chromium)"
)


def open_in_chromium(html: Path, screenshot: Path):
    """Load ``html`` headless; returns (console errors, page text, header texts after one sort click)."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on(
            "console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None
        )
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
        page.goto(html.resolve().as_uri())
        page.wait_for_load_state("load")
        text = page.inner_text("body")
        sorted_column = None
        if page.locator("#table-headline").count():
            page.click("#table-headline th:nth-child(5)")  # estimate, ascending
            cells = page.locator("#table-headline tbody tr td:nth-child(5)").all_inner_texts()
            sorted_column = [float(c) for c in cells if c != "NULL"]
        page.screenshot(path=str(screenshot), full_page=True)
        browser.close()
    print(f"screenshot: {screenshot}")
    return errors, text, sorted_column


def test_run_stores_statistics(run_db):
    db, result = run_db
    with Store(db, read_only=True) as store:
        counts = {
            t: store.query(f'SELECT count(*) FROM "{t}" WHERE run_id = $r', {"r": result.run_id})[1][0][0]
            for t in (
                "model_scores",
                "model_comparisons",
                "rankings",
                "ranking_agreement",
                "axis_correlations",
            )
        }
        _, rows = store.query(
            """SELECT count(*) FROM model_scores WHERE run_id = $r AND p_value IS NOT NULL
               AND (p_adjusted < p_value OR ci_low > estimate OR ci_high < estimate)""",
            {"r": result.run_id},
        )
    assert all(n > 0 for n in counts.values()), counts
    assert rows == [(0,)]  # BH never lowers a p-value; CIs contain their estimate


def test_stats_twice_gives_the_same_tables(run_db, tmp_path):
    db, result = run_db
    copy = tmp_path / "copy.duckdb"
    shutil.copy(db, copy)
    run_stats(copy, result.run_id)
    with Store(copy, read_only=True) as a, Store(db, read_only=True) as b:
        for table in ("model_scores", "rankings", "ranking_agreement", "axis_correlations"):
            sql = f'SELECT * EXCLUDE (run_id) FROM "{table}" ORDER BY ALL'
            assert a.query(sql)[1] == b.query(sql)[1], table


@needs_chromium
def test_report_renders_in_chromium_without_errors(run_db, tmp_path):
    db, _ = run_db
    html = write_report(db, tmp_path / "report.html")
    errors, text, sorted_column = open_in_chromium(html, tmp_path / "report.png")
    assert errors == []
    for heading in (
        "Four-axis profile per model",
        "Activation dispersion per layer",
        "Rankings across datasets",
        "Do the axes fail independently?",
        "Over training",
        "Most unstable examples",
    ):
        assert heading in text
    assert sorted_column and sorted_column == sorted(sorted_column)  # the table sorts on click
    # self-contained: nothing is loaded from elsewhere (SVG namespaces are identifiers, not requests)
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:|//)""", html.read_text())


def test_every_plot_has_labelled_axes(run_db, monkeypatch):
    from sago_fast.report import plots
    from sago_fast.report.page import render_report

    figures = []
    original = plots._svg
    monkeypatch.setattr(plots, "_svg", lambda fig: figures.append(fig) or original(fig))
    db, result = run_db
    with Store(db, read_only=True) as store:
        render_report(load_report_data(store, result.run_id))
    assert len(figures) >= 5  # a profile per dataset, layers, rankings, correlations
    for fig in figures:
        for ax in fig.axes:
            if ax.get_label() == "<colorbar>":
                assert ax.get_ylabel()  # the colour scale says what it measures
                continue
            assert ax.get_xlabel() and ax.get_ylabel(), fig
            if ax.get_ylabel() != "model / dataset":
                assert "(" in ax.get_ylabel(), ax.get_ylabel()  # the unit, in parentheses


@needs_chromium
def test_empty_database_gives_an_empty_but_valid_report(tmp_path):
    db = tmp_path / "empty.duckdb"
    Store(db).close()
    html = write_report(db, tmp_path / "empty.html")
    errors, text, _ = open_in_chromium(html, tmp_path / "empty.png")
    assert errors == []
    assert "holds no finished run" in text


def test_old_schema_is_migrated_and_newer_refused(tmp_path):
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE schema_version (version INTEGER, description VARCHAR, applied_at TIMESTAMP)")
    for migration in MIGRATIONS[:2]:
        con.execute(migration.sql)
        con.execute(
            "INSERT INTO schema_version VALUES (?, ?, now())", [migration.version, migration.description]
        )
    con.close()
    write_report(db, tmp_path / "old.html")
    with Store(db, read_only=True) as store:
        assert store.schema_version() == MIGRATIONS[-1].version
        assert "rankings" in store.tables()
    con = duckdb.connect(str(db))
    con.execute("INSERT INTO schema_version VALUES (99, 'from the future', now())")
    con.close()
    with pytest.raises(StoreError, match="newer than this sago_fast"):
        write_report(db, tmp_path / "new.html")
    assert not (tmp_path / "new.html").exists()


def test_one_model_says_what_the_comparisons_need(tmp_path, checkpoints, cache_dir):
    """A one-model run draws no one-dot rank plot or one-point training curve: it says what they need."""
    from sago_fast.run import RunConfig, run

    db = tmp_path / "one.duckdb"
    config = RunConfig(
        models=(str(checkpoints["llama"]),),
        datasets=("capitals",),
        db=db,
        limit=3,
        variants_per_family=1,
        families=("typo", "option_permutation"),
        cache_dir=cache_dir,
    )
    run(config, progress=False)
    html = write_report(db, tmp_path / "one.html").read_text(encoding="utf-8")
    assert "Not drawn: a ranking needs at least 2 models (this run has 1)" in html
    assert "Not drawn: a curve over training needs at least 2 checkpoints of a training run" in html


def test_two_models_draw_the_rankings_and_no_training_curve_without_steps(run_db, tmp_path):
    db, _ = run_db
    html = write_report(db, tmp_path / "r.html").read_text(encoding="utf-8")
    assert "Not drawn: a ranking" not in html and "<svg" in html
    assert "(checkpoints with a step; this run has 0)" in html  # llama, qwen2, gpt2: not a training run


def test_the_header_names_the_methods_the_scores_used(run_db):
    """The header describes the intervals as the ``test`` column does, and lists the run's methods."""
    from sago_fast.report.page import render_report

    db, result = run_db
    with Store(db, read_only=True) as store:
        data = load_report_data(store, result.run_id)
        tests = {row[0] for row in store.query("SELECT DISTINCT test FROM model_scores")[1] if row[0]}
    html = render_report(data)
    assert "percentile bootstrap" not in html
    header = html.split("</p>", 2)[0]
    methods = {test.split(":")[0] for test in tests} - {"none"}
    assert methods and all(method in header for method in methods), (methods, header[-800:])


def test_over_training_draws_one_panel_per_metric_and_says_when_the_scale_is_logarithmic():
    """Two confidence metrics (option_js on one dataset, p_gold_diff on another) get a panel each, labelled
    with their own metric; dispersion levels ~15 and ~1.5 share a panel on a log scale that says so."""
    import matplotlib.pyplot as plt

    from sago_fast.report import plots
    from sago_fast.report.contents import ReportData

    data = ReportData("run")
    names = ("training_run", "dataset", "axis", "metric", "step", "estimate", "ci_low", "ci_high")
    for step, (a, b) in zip((1, 2, 3), ((15.0, 1.5), (14.0, 1.2), (13.0, 1.6)), strict=True):
        data.trajectories += [
            dict(zip(names, row, strict=True))
            for row in (
                ("zoo", "comparison", "activation", "dispersion", step, a, a - 1, a + 1),
                ("zoo", "capitals", "activation", "dispersion", step, b, b - 0.1, b + 0.1),
                ("zoo", "capitals", "confidence", "option_js", step, 0.1 * step, None, None),
                ("zoo", "letters", "confidence", "p_gold_diff", step, 0.2 * step, None, None),
            )
        ]
    figures = []
    original = plots._svg
    plots._svg = lambda fig: figures.append(fig) or original(fig)
    try:
        plots.training_plot(data)
    finally:
        plots._svg = original
    axes = figures[0].axes
    titles = [ax.get_title() for ax in axes]
    assert titles == [
        "activation: dispersion (★ significant change)",
        "confidence: option_js (★ significant change)",
        "confidence: p_gold_diff (★ significant change)",
    ]
    assert axes[0].get_yscale() == "log" and "log scale" in axes[0].get_ylabel()
    assert "option JS" in axes[1].get_ylabel() and "P(gold)" in axes[2].get_ylabel()
    assert axes[1].get_yscale() == "linear"
    plt.close("all")
