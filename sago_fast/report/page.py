"""Render a run's report to one HTML file: data (data.py) → figures (plots.py) → Jinja2 template."""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape

from sago_fast.atomic import atomic_path
from sago_fast.errors import OutdatedSchemaError
from sago_fast.report.contents import ReportData, Table, load_report_data, natural_key
from sago_fast.store import Store
from sago_fast.store.reads import cell_text

log = logging.getLogger(__name__)


def html_table(table: Table, name: str) -> Markup:
    """A sortable table (escaped cells)."""
    head = "".join(f"<th>{escape(c)}</th>" for c in table.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(cell_text(v, digits=4))}</td>" for v in row) + "</tr>"
        for row in table.rows
    )
    return Markup(
        f'<table class="sortable" id="table-{escape(name)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    )


def _needs(what: str) -> Markup:
    """In place of a plot that would show one point: what the section needs."""
    return Markup(f'<p class="needs">Not drawn: {escape(what)}.</p>')


def render_report(data: ReportData) -> str:
    from jinja2 import Environment, PackageLoader, select_autoescape

    from sago_fast.report import plots

    env = Environment(
        loader=PackageLoader("sago_fast.report", "templates"), autoescape=select_autoescape(["j2"])
    )
    env.globals["table"] = html_table
    methods = sorted({test.split(":")[0] for test in data.tests} - {"none"})  # "studentized bootstrap", ...
    context: dict[str, Any] = {"run": data.run_info or None, "empty": data.empty, "tests": methods}
    if not data.empty:
        headline = data.headline.records()
        datasets = sorted({r["dataset"] for r in headline})
        models = sorted({r["model"] for r in headline}, key=natural_key)
        steps: dict[str, set[int]] = defaultdict(set)  # training run -> its steps with scores
        for point in data.trajectories:
            steps[point["training_run"]].add(point["step"])
        n_steps = max(map(len, steps.values()), default=0)
        reversed_models: dict[tuple[str, str], set[str]] = {}
        for reversal in data.reversals.records():
            key = (reversal["axis"], reversal["metric"])
            reversed_models.setdefault(key, set()).update((reversal["model_a"], reversal["model_b"]))
        context.update(
            profiles=[(d, plots.profile_plot(data, d)) for d in datasets],
            headline=data.headline,
            layers=plots.layer_plot(data) if data.layers else "<p>No per-layer scores.</p>",
            rankings=(
                _needs(f"a ranking needs at least 2 models (this run has {len(models)})")
                if len(models) < 2
                else plots.ranking_plot(data, reversed_models)
                if data.ranks
                else "<p>No rankings.</p>"
            ),
            reversals=data.reversals,
            agreement=data.agreement,
            correlations=plots.correlation_heatmap(data) if data.correlations else "<p>Too few examples.</p>",
            training=(
                _needs(
                    "a curve over training needs at least 2 checkpoints of a training run (checkpoints with "
                    f"a step; this run has {n_steps})"
                )
                if n_steps < 2
                else plots.training_plot(data)
            ),
            changes=data.changes,
            sequential=data.sequential,
            separations=data.separations,
            sequences=plots.sequence_plot(data) if data.sequences else "",
            unstable=data.unstable,
            significance=data.significance,
        )
    return env.get_template("report.html.j2").render(**context)


def _reading(db: str | os.PathLike[str]) -> Store:
    """The results file opened read-only, migrated first (opened read-write once) where it is older."""
    try:
        return Store(db, read_only=True)
    except OutdatedSchemaError:
        Store(db, create=False).close()
        return Store(db, read_only=True)


def write_report(
    db: str | os.PathLike[str],
    out: str | os.PathLike[str],
    run_id: str | None = None,
    *,
    n_unstable: int = 10,
) -> Path:
    """Write the report of ``run_id`` (default: the latest finished run) to ``out`` (temp file + rename).

    A file whose only run is still being written reports that run as far as its committed chunks go.
    Statistics are computed first when the run has none yet; a database without runs gives an
    empty-but-valid report. Older results files are migrated when opened."""
    from sago_fast.errors import InputError
    from sago_fast.stats import run_stats
    from sago_fast.stats.data import check_run, latest_finished_run
    from sago_fast.store.reads import latest_running_run

    if isinstance(n_unstable, bool) or not isinstance(n_unstable, int) or n_unstable < 0:
        raise InputError(f"--unstable (n_unstable) must be a whole number >= 0, not {n_unstable!r}")
    with _reading(db) as store:  # a report only reads: a read-only file is reported as it is
        if run_id is not None:
            check_run(store, run_id)
        run = (
            run_id or latest_finished_run(store) or latest_running_run(store)
        )  # a first run, as far as it got
        needs_stats = run is not None and not store.has_stats(run)
    if needs_stats:
        log.info("run %s has no statistics yet: computing them", run)
        run_stats(db, run)
    with Store(db, read_only=True) as store:
        data = load_report_data(store, run, n_unstable)
    path = Path(out)
    html = render_report(data)
    with atomic_path(path) as tmp:
        tmp.write_text(html, encoding="utf-8")
    return path
