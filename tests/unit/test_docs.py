"""Every public surface is documented in the README (a new command or table without a section fails)."""

from __future__ import annotations

from pathlib import Path

from sago_fast.cli.app import app
from sago_fast.store import Store

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def test_every_command_has_a_readme_section():
    for command in app.registered_commands:
        assert f"### `sago {command.name}`" in README, command.name


def test_every_table_is_in_the_readme_table_list():
    with Store() as store:
        for table in store.tables():
            assert f"| `{table}` |" in README, table


def test_readme_axes_table_matches_the_metric_catalogue():
    import re

    from sago_fast.axes.catalogue import CATALOGUE

    section = README.split("## The four axes", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| axis")]
    documented = {
        (row.split("|")[1].strip(), name)
        for row in rows
        for name in re.findall(r"`([a-z_0-9]+)`", row.split("|")[2])
    }
    catalogue = {(CATALOGUE.get(n).axis, n) for n in CATALOGUE.names()}
    assert catalogue <= documented, catalogue - documented
    assert {m for _, m in documented} <= set(CATALOGUE.names()) | {
        "item_scores",
        "layer_scores",
        "dataset_scores",
        "model_scores",
        "last",
        "mean",
        "canonical",
    }
