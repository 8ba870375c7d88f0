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
