"""The report's figures: matplotlib (Agg) rendered to inline SVG text, every axis labelled with its unit."""

from __future__ import annotations

import io
from collections import defaultdict

import numpy as np

from sago_fast.axes.catalogue import CATALOGUE, axes
from sago_fast.report.contents import ReportData, natural_key


def axis_label(metric: str) -> str:
    """A metric's y-axis label with its unit, from the metric catalogue."""
    return CATALOGUE.get(metric).axis_label if metric in CATALOGUE else f"{metric} (score)"


AXIS_ORDER = ("accuracy", *axes())
RANK_ORDER = (*AXIS_ORDER, "worst_axis")


def _svg(fig) -> str:
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog: the SVG is inlined in HTML


def _figure(n_panels: int, width: float = 3.6, height: float = 3.0):
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller files, selectable labels
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1, max(n_panels, 1), figsize=(width * max(n_panels, 1), height), squeeze=False, layout="constrained"
    )
    return fig, list(axes[0])


def profile_plot(data: ReportData, dataset: str) -> str:
    """Accuracy and the four axes' headline scores per model (bars with 95% bootstrap CIs)."""
    by_axis: dict[str, list[dict]] = defaultdict(list)
    for row in data.headline.records():
        if row["dataset"] == dataset:
            by_axis[row["axis"]].append(row)
    axes_present = [a for a in AXIS_ORDER if a in by_axis]
    fig, panels = _figure(len(axes_present), width=3.4)
    for ax, axis in zip(panels, axes_present, strict=False):
        entries = sorted(by_axis[axis], key=lambda r: natural_key(r["model"]))
        models = [e["model"] for e in entries]
        estimate = np.array([e["estimate"] for e in entries], dtype=float)
        low = np.array([e["estimate"] if e["ci_low"] is None else e["ci_low"] for e in entries], dtype=float)
        high = np.array(
            [e["estimate"] if e["ci_high"] is None else e["ci_high"] for e in entries], dtype=float
        )
        ax.bar(range(len(models)), estimate, color="#4c72b0" if axis != "accuracy" else "#55a868")
        ax.errorbar(
            range(len(models)),
            estimate,
            yerr=[estimate - low, high - estimate],
            fmt="none",
            ecolor="black",
            capsize=3,
        )
        metric = entries[0]["metric"]
        ax.set_title(f"{axis}: {metric}", fontsize=9)
        ax.set_xticks(range(len(models)), models, rotation=30, ha="right", fontsize=8)
        ax.set_xlabel("model")
        ax.set_ylabel(axis_label(metric), fontsize=8)
    fig.suptitle(f"{dataset}: accuracy and four-axis profile (higher = less stable), 95% CI", fontsize=10)
    return _svg(fig)


def layer_plot(data: ReportData) -> str:
    """Activation dispersion per layer (mean pooling), one line per model, one panel per dataset."""
    datasets = sorted({r["dataset"] for r in data.layers})
    fig, panels = _figure(len(datasets))
    for ax, dataset in zip(panels, datasets, strict=False):
        curves: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for row in data.layers:
            if row["dataset"] == dataset:
                curves[row["model"]].append((row["layer"], row["value"]))
        for model in sorted(curves, key=natural_key):
            points = sorted(curves[model])
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=model)
        ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
        ax.set_title(dataset, fontsize=9)
        ax.set_xlabel("layer (0 = embeddings)")
        ax.set_ylabel("dispersion at the layer (cosine dist. ÷ between-example dist.)", fontsize=8)
        ax.legend(fontsize=7)
    return _svg(fig)


def ranking_plot(data: ReportData, reversed_models: dict[tuple[str, str], set[str]]) -> str:
    """Rank of each model per dataset for each headline metric (1 = most stable / accurate); models in a
    significant rank reversal of that metric (``reversed_models[(axis, metric)]``) are drawn thick and red."""
    by_metric: dict[tuple[str, str], list[tuple[str, str, float]]] = defaultdict(list)
    for row in data.ranks:
        by_metric[(row["axis"], row["metric"])].append((row["source"], row["model"], row["rank"]))
    keys = sorted(by_metric, key=lambda k: RANK_ORDER.index(k[0]) if k[0] in RANK_ORDER else 99)
    fig, panels = _figure(len(keys), width=3.0)
    for ax, key in zip(panels, keys, strict=False):
        entries = by_metric[key]
        sources = sorted({e[0] for e in entries})
        models = sorted({e[1] for e in entries}, key=natural_key)
        for model in models:
            ranks = [next((r for s, m, r in entries if s == src and m == model), np.nan) for src in sources]
            hot = model in reversed_models.get(key, set())
            ax.plot(
                range(len(sources)),
                ranks,
                marker="o",
                label=model,
                linewidth=3 if hot else 1.2,
                color="red" if hot else None,
            )
        ax.set_xticks(range(len(sources)), sources, rotation=30, ha="right", fontsize=8)
        ax.set_xlabel("dataset")
        ax.set_ylabel("rank (1 = best)")
        ax.invert_yaxis()
        ax.set_title(f"{key[0]}: {key[1]}", fontsize=9)
        ax.legend(fontsize=7)
    return _svg(fig)


def correlation_heatmap(data: ReportData) -> str:
    """Spearman correlation between axes across examples: rows (model, dataset), columns axis pairs."""
    rows = sorted(
        {(r["model"], r["dataset"]) for r in data.correlations}, key=lambda k: (natural_key(k[0]), k[1])
    )
    pairs = sorted({(r["axis_a"], r["axis_b"]) for r in data.correlations})
    grid = np.full((len(rows), len(pairs)), np.nan)
    for r in data.correlations:
        if r["spearman"] is not None:
            grid[rows.index((r["model"], r["dataset"])), pairs.index((r["axis_a"], r["axis_b"]))] = r[
                "spearman"
            ]
    fig, panels = _figure(1, width=1.2 * len(pairs) + 3, height=0.35 * len(rows) + 2)
    ax = panels[0]
    image = ax.imshow(grid, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
    ax.set_xticks(range(len(pairs)), [f"{a} × {b}" for a, b in pairs], rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), [f"{m} / {d}" for m, d in rows], fontsize=8)
    ax.set_xlabel("axis pair")
    ax.set_ylabel("model / dataset")
    for i in range(len(rows)):
        for j in range(len(pairs)):
            if np.isfinite(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=7)
    fig.colorbar(image, ax=ax, label="Spearman correlation across examples (unitless)")
    return _svg(fig)


LOG_SCALE_SPREAD = 5.0  # lines of one panel whose levels differ more than this share a log scale


def training_plot(data: ReportData) -> str:
    """Headline scores over training steps, one panel per (axis, metric) and one line per (training run,
    dataset), with the CI band; steps where the score changed significantly from the step before are
    marked. Where the lines of a panel sit at levels more than ``LOG_SCALE_SPREAD`` times apart (one
    dataset's dispersion near 15, another's near 1.5), the panel's y axis is logarithmic and says so."""
    lines: dict[tuple[str, str], dict[tuple[str, str], list[tuple[int, float, float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for t in data.trajectories:
        low, high = t["ci_low"], t["ci_high"]
        lines[(t["axis"], t["metric"])][(t["training_run"], t["dataset"])].append(
            (t["step"], t["estimate"], np.nan if low is None else low, np.nan if high is None else high)
        )
    changed = {  # (run, dataset, axis, metric, the step it changed to)
        (c["training_run"], c["dataset"], c["axis"], c["metric"], c["step_to"])
        for c in data.changes.records()
    }
    panels_present = sorted(lines, key=lambda k: (AXIS_ORDER.index(k[0]) if k[0] in AXIS_ORDER else 99, k[1]))
    several_runs = len({run for by_line in lines.values() for run, _ in by_line}) > 1
    fig, panels = _figure(len(panels_present), width=3.4)
    for ax, (axis, metric) in zip(panels, panels_present, strict=False):
        levels = []
        for (run, dataset), points in sorted(lines[(axis, metric)].items()):
            columns = np.array(sorted(points), dtype=np.float64)  # (n_steps, 4)
            steps, estimate, low, high = columns.T
            levels.append(np.nanmean(estimate))
            label = f"{run} / {dataset}" if several_runs else dataset
            (line,) = ax.plot(steps, estimate, marker="o", markersize=3, label=label)
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
            marked = [i for i, s in enumerate(steps) if (run, dataset, axis, metric, int(s)) in changed]
            if marked:
                ax.scatter(steps[marked], estimate[marked], marker="*", s=90, color="crimson", zorder=3)
        log_scale = _needs_log_scale(levels, lines[(axis, metric)].values())
        if log_scale:
            ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel(axis_label(metric) + (", log scale" if log_scale else ""), fontsize=8)
        ax.set_title(f"{axis}: {metric} (★ significant change)", fontsize=9)
        ax.legend(fontsize=7)
    return _svg(fig)


def _needs_log_scale(levels: list[float], lines) -> bool:
    """Whether a panel's lines sit at positive levels more than ``LOG_SCALE_SPREAD`` times apart."""
    values = np.array([p[k] for points in lines for p in points for k in (1, 2, 3)], dtype=np.float64)
    values = values[np.isfinite(values)]
    if len(levels) < 2 or values.size == 0 or values.min() <= 0:
        return False
    return max(levels) / min(levels) > LOG_SCALE_SPREAD


def sequence_plot(data: ReportData) -> str:
    """Each sequential unit's confidence-sequence half-width over the examples it visited, one panel per
    (model, dataset) and one line per followed metric, with the wanted precision as a dashed line."""
    lines: dict[tuple[str, str], dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    wanted: dict[tuple[str, str], float | None] = {}
    for s in data.sequences:
        lines[(s["model"], s["dataset"])][s["metric"]].append((s["n_examples"], s["half_width"]))
        wanted[(s["model"], s["dataset"])] = s["precision"]
    units = sorted(lines)
    fig, panels = _figure(len(units), width=3.6)
    for ax, unit in zip(panels, units, strict=False):
        for metric, points in sorted(lines[unit].items()):
            n, width = np.array(sorted(points), dtype=np.float64).T
            ax.plot(n, width, marker="o", markersize=2, label=metric)
        if wanted[unit] is not None:
            ax.axhline(wanted[unit], color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel("examples visited")
        ax.set_ylabel("half-width (metric units)", fontsize=8)
        ax.set_title(f"{unit[0]} × {unit[1]}", fontsize=9)
        ax.legend(fontsize=6)
    return _svg(fig)
