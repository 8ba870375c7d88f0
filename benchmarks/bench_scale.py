"""A results file at the scale of a training run, simulated without a model, and what reading it costs.

The source is a results file holding one real unit (one checkpoint on one dataset: for the figures in the
README, SmolLM2-135M on real MMLU items under the default design). Its dataset is grown to ``--items``
examples (the source's examples cloned under new ids, with their variants), then ``--checkpoints`` N
simulated checkpoints are appended, one transaction each, through the store's own insert path
(:meth:`sago_fast.store.Store.insert`): every row the real unit wrote (outputs, answers per mode, item,
layer and dataset scores, design cells, the unit and its claim) for every example, under the checkpoint's
own model id and training step, with each score moved by a small seeded noise so the statistics have
something to find. At each size in ``--checkpoints`` (cumulative: 10 then 30 then 100 grows one file) it
measures:

- the file: bytes on disk, DuckDB's used blocks, and both per item-checkpoint (after the compaction
  ``sago run`` does at its end);
- ``sago stats``, ``sago report``, ``sago status`` and every query of the README's SQL cookbook, each as
  the user runs it (a child process): wall time and peak RSS, stopped past the targets (4 GB, 15 minutes
  for statistics and the report, a minute for the others) and said so.

    python benchmarks/bench_scale.py --source RUN.duckdb --items 12990 --checkpoints 10 30 --out /tmp/scale
        [--markdown] [--json FILE]

The source: ``sago run -m SmolLM2.gguf -d mmlu:FOLDER --db RUN.duckdb`` on ``mmlu_sample(FOLDER, 60, seed=1)``
(``benchmarks/real_model.py``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sago_fast.store import Store
from sago_fast.store.compact import blocks, compact

log = logging.getLogger("bench_scale")
warnings.filterwarnings("ignore", message="Arrow output on a DB-API result")  # the copy is what we want

README = Path(__file__).resolve().parents[1] / "README.md"
PER_CHECKPOINT = (  # the tables a unit writes, with the column its example sits in (None: not per example)
    ("outputs", "example_id"),
    ("mode_answers", "example_id"),
    ("item_scores", "example_id"),
    ("layer_scores", "example_id"),
    ("design_cells", "example_id"),
    ("dataset_scores", None),
    ("unit_estimators", None),
)
NOISY = {"value": 0.05, "p_gold": 0.02}  # relative noise added to these columns per simulated checkpoint


@dataclass(frozen=True)
class Timing:
    what: str
    seconds: float
    peak_rss_mb: float
    outcome: str  # ok, or why not


@dataclass
class Size:
    checkpoints: int
    items: int
    bytes_on_disk: int
    used_bytes: int
    rows: dict[str, int]
    timings: list[Timing]
    report_opened: str = ""  # the report in headless Chromium

    @property
    def per_item_checkpoint(self) -> float:
        return self.bytes_on_disk / (self.checkpoints * self.items)


def cookbook_queries(readme: Path = README) -> list[str]:
    """The SQL blocks of the README's "SQL cookbook" section, in order."""
    text = readme.read_text(encoding="utf-8")
    section = text.split("\n## SQL cookbook", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sql\n(.*?)```", section, flags=re.S)]


def source_unit(store: Store) -> tuple[str, str, str]:
    """(run id, model id, dataset id) of the source's one unit."""
    _, rows = store.query("SELECT run_id, model_id, dataset_id FROM units")
    if len(rows) != 1:
        raise SystemExit(f"the source must hold exactly one unit, not {len(rows)}")
    return rows[0]


def clone_ids(ids: pa.Array | pa.ChunkedArray, replica: int) -> pa.Array | pa.ChunkedArray:
    """The example ids of the ``replica``-th clone (0: the source's own)."""
    return ids if replica == 0 else pc.binary_join_element_wise(ids, pa.scalar(f"~{replica}"), "")


CLONED_IDS = (
    "variant_id",
)  # ids that name an example's own rows: cloned with it, so no two clones share one


def spread(table: pa.Table, column: str, items: int, n_base: int) -> pa.Table:
    """The rows of the source's examples repeated for every example of the grown dataset: the r-th clone
    of example e gets e's rows under the id ``e~r`` (and its variants the ids ``v~r``); the first ``items``
    examples are kept."""
    index = table.schema.get_field_index(column)
    parts = []
    for replica in range(-(-items // n_base)):
        part = table.set_column(index, column, clone_ids(table.column(column), replica))
        for name in CLONED_IDS:
            if name in table.column_names:
                at = table.schema.get_field_index(name)
                part = part.set_column(at, name, clone_ids(table.column(name), replica))
        kept = min(n_base, items - replica * n_base)
        if kept < n_base:  # the last clone: its first `kept` examples (in the source's id order)
            order = sorted(set(table.column(column).to_pylist()))[:kept]
            part = part.filter(pc.is_in(table.column(column), value_set=pa.array(order)))
        parts.append(part)
    return pa.concat_tables(parts)


def grow_dataset(store: Store, dataset_id: str, items: int, n_base: int) -> None:
    """The dataset grown to ``items`` examples by cloning its examples and their variants."""
    if items < n_base:
        raise SystemExit(f"--items {items} is below the source's {n_base} examples")
    for table in ("examples", "variants"):
        rows = store.con.execute(
            f"SELECT * FROM {table} WHERE dataset_id = $d", {"d": dataset_id}
        ).to_arrow_table()
        grown = spread(rows, "example_id", items, n_base).slice(rows.num_rows)  # the clones only
        store.insert(table, {name: grown.column(name) for name in grown.column_names})
    store.query("UPDATE datasets SET n_examples = $n WHERE dataset_id = $d", {"n": items, "d": dataset_id})


def unit_rows(store: Store, run_id: str, model_id: str, items: int, n_base: int) -> dict[str, pa.Table]:
    """The source unit's rows per table, spread over the grown dataset's examples."""
    out = {}
    for table, column in PER_CHECKPOINT:
        rows = store.con.execute(
            f"SELECT * FROM {table} WHERE run_id = $r AND model_id = $m", {"r": run_id, "m": model_id}
        ).to_arrow_table()
        out[table] = rows if column is None else spread(rows, column, items, n_base)
    return out


def as_checkpoint(table: pa.Table, model_id: str, rng: np.random.Generator, **fixed: object) -> dict:
    """``table``'s columns under ``model_id`` (and the ``fixed`` values), noisy columns moved a little."""
    columns: dict[str, object] = {}
    n = table.num_rows
    for name in table.column_names:
        values = table.column(name)
        if name == "model_id":
            values = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([model_id]))
        elif name in fixed:
            values = pa.array([fixed[name]] * n)
        elif name in NOISY and pa.types.is_floating(values.type):
            noisy = values.to_numpy(zero_copy_only=False) * (1.0 + NOISY[name] * rng.standard_normal(n))
            values = pa.array(noisy, mask=pc.is_null(values).to_numpy(zero_copy_only=False))
        columns[name] = values
    return columns


def append_checkpoints(
    store: Store, run_id: str, model_id: str, dataset_id: str, items: int, n_base: int, start: int, stop: int
) -> None:
    """Checkpoints ``start`` .. ``stop - 1`` of the simulated training run, one transaction each, ending as
    a unit's last transaction ends (its layer rows clustered)."""
    source = unit_rows(store, run_id, model_id, items, n_base)
    one = {
        table: store.con.execute(
            f"SELECT * FROM {table} WHERE {where}", {"r": run_id, "m": model_id}
        ).to_arrow_table()
        for table, where in (
            ("models", "model_id = $m AND $r IS NOT NULL"),
            ("units", "run_id = $r AND model_id = $m"),
            ("run_units", "run_id = $r AND $m IS NOT NULL"),
            ("checkpoint_names", "run_id = $r AND model_id = $m"),
        )
    }
    for c in range(start, stop):
        rng = np.random.default_rng(c)
        sim, path = f"sim-{c:04d}", f"/sim/step-{c * 100:06d}"
        named = {"checkpoint": path, "training_run": "/sim", "step": c * 100}
        store.query("BEGIN TRANSACTION")
        store.insert("models", as_checkpoint(one["models"], sim, rng, **named))
        store.insert("checkpoint_names", as_checkpoint(one["checkpoint_names"], sim, rng, **named))
        unit = {"unit_id": f"unit-{sim}", "checkpoint": path, "n_examples": items}
        store.insert("units", as_checkpoint(one["units"], sim, rng, **unit))
        store.insert("run_units", as_checkpoint(one["run_units"], sim, rng, **unit, position=c + 1))
        for table, rows in source.items():
            store.insert(table, as_checkpoint(rows, sim, rng))
        store.cluster_layer_rows(run_id, sim, dataset_id)  # as a unit's last transaction does
        store.query("COMMIT")


def rss_mb(pid: int) -> float:
    """The resident memory of process ``pid`` now (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def timed(command: list[str], what: str, cwd: Path, cap_mb: float, limit_s: float) -> Timing:
    """Run ``command`` as the user would (a child process): its wall time and peak RSS, sampled every
    0.1 s; stopped when it passes ``cap_mb`` of memory or ``limit_s`` seconds (the targets), and said so."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak, outcome = 0.0, ""
    while proc.poll() is None:
        peak = max(peak, rss_mb(proc.pid))
        if peak > cap_mb or time.perf_counter() - started > limit_s:
            outcome = (
                f"stopped over {cap_mb / 1024:.0f} GB" if peak > cap_mb else f"stopped after {limit_s:.0f} s"
            )
            proc.kill()
            break
        time.sleep(0.1)
    proc.wait()
    seconds = time.perf_counter() - started
    error = proc.stderr.read() if proc.stderr else ""
    if not outcome:
        outcome = (
            "ok" if proc.returncode == 0 else f"exit {proc.returncode}: {error.strip().splitlines()[-1:]}"
        )
    if outcome != "ok":
        log.warning("%s: %s", what, outcome)
    return Timing(what, seconds, peak, outcome)


def measure(db: Path, checkpoints: int, items: int, out: Path, queries: list[str], cap_mb: float) -> Size:
    compact(db)
    with Store(db, read_only=True) as store:
        used = blocks(store)
        rows = {t: store.query(f"SELECT count(*) FROM {t}")[1][0][0] for t, _ in PER_CHECKPOINT}
    sago = [sys.executable, "-m", "sago_fast.cli.app"]
    timings = [
        timed([*sago, "status", "--db", str(db)], "sago status", out, cap_mb, 60),
        timed([*sago, "stats", "--db", str(db)], "sago stats", out, cap_mb, 15 * 60),
        timed(
            [*sago, "report", "--db", str(db), "-o", str(out / "report.html")],
            "sago report",
            out,
            cap_mb,
            15 * 60,
        ),
    ]
    for i, sql in enumerate(queries, 1):
        timings.append(timed([*sago, "query", "--db", str(db), sql], f"cookbook query {i}", out, cap_mb, 60))
    report = out / "report.html"
    rows["report_bytes"] = report.stat().st_size if report.exists() else -1
    opened = open_in_browser(report) if report.exists() else "no report"
    return Size(checkpoints, items, db.stat().st_size, used.used * used.block_size, rows, timings, opened)


def open_in_browser(html: Path) -> str:
    """The report loaded in headless Chromium (the report test's way): seconds to load and console errors."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return "no chromium"
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        started = time.perf_counter()
        page.goto(html.resolve().as_uri(), timeout=300_000)
        page.wait_for_load_state("load", timeout=300_000)
        seconds = time.perf_counter() - started
        browser.close()
    return f"opens in {seconds:.1f} s, {len(errors)} console errors"


def shown(timing: Timing) -> str:
    return f"{timing.seconds:.1f} s" + ("" if timing.outcome == "ok" else f" ({timing.outcome})")


def markdown(sizes: list[Size]) -> str:
    lines = [
        "| checkpoints | items | on disk | per item-checkpoint | used blocks | layer_scores rows | sago stats | sago report | sago status | slowest cookbook query |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in sizes:
        by = {t.what: t for t in s.timings}
        cook = max((t for t in s.timings if t.what.startswith("cookbook")), key=lambda t: t.seconds)
        lines.append(
            f"| {s.checkpoints} | {s.items} | {s.bytes_on_disk / 1e6:.0f} MB | {s.per_item_checkpoint / 1e3:.1f} KB "
            f"| {s.used_bytes / 1e6:.0f} MB | {s.rows['layer_scores']:,} "
            f"| {shown(by['sago stats'])}, {by['sago stats'].peak_rss_mb:.0f} MB "
            f"| {shown(by['sago report'])} ({s.rows['report_bytes'] / 1e6:.1f} MB; {s.report_opened}) "
            f"| {shown(by['sago status'])} | {shown(cook)} ({cook.what}) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", type=Path, required=True, help="a results file with one real unit")
    parser.add_argument("--items", type=int, default=12990, help="examples of the grown dataset")
    parser.add_argument("--checkpoints", type=int, nargs="+", default=[10, 30, 100])
    parser.add_argument("--out", type=Path, default=Path("/tmp/sago-scale"))
    parser.add_argument(
        "--memory-cap-gb", type=float, default=4.0, help="stop a command past this RSS (target)"
    )
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    db = args.out / "scale.duckdb"
    shutil.copyfile(args.source, db)
    queries = cookbook_queries()
    sizes = []
    with Store(db) as store:
        run_id, model_id, dataset_id = source_unit(store)
        n_base = store.query("SELECT count(*) FROM examples WHERE dataset_id = $d", {"d": dataset_id})[1][0][
            0
        ]
        grow_dataset(store, dataset_id, args.items, n_base)
    done = 0
    for n in sorted(args.checkpoints):
        started = time.perf_counter()
        with Store(db) as store:
            append_checkpoints(store, run_id, model_id, dataset_id, args.items, n_base, done, n)
        log.info("%d checkpoints written in %.0f s", n, time.perf_counter() - started)
        done = n
        sizes.append(measure(db, n, args.items, args.out, queries, args.memory_cap_gb * 1024))
        log.info("%s", markdown(sizes[-1:]))
    header = (
        f"{args.items} items, source {args.source.name}, {datetime.now():%Y-%m-%d}, {os.cpu_count()} CPUs"
    )
    if args.markdown:
        print(header + "\n\n" + markdown(sizes))
    if args.json:
        args.json.write_text(
            json.dumps([asdict(s) | {"per_item_checkpoint": s.per_item_checkpoint} for s in sizes], indent=1)
        )


if __name__ == "__main__":
    main()
