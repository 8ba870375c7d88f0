"""Evaluate checkpoints on datasets: variants → ONNX Runtime → the four SAGO axes → DuckDB."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from types import UnionType
from typing import TYPE_CHECKING, Annotated, Any, Union, get_args, get_origin, get_type_hints

import typer

from sago_fast.run.config import RunConfig

if TYPE_CHECKING:
    from sago_fast.run.pipeline import RunResult


CONFIG_OPTION = inspect.Parameter(
    "config",
    inspect.Parameter.KEYWORD_ONLY,
    default=None,
    annotation=Annotated[
        Path | None, typer.Option("--config", help="YAML file with the same settings; options override it.")
    ],
)


def run_command_for(config_class: type[RunConfig]) -> Callable[..., None]:
    """The ``sago run`` command of ``config_class``: one option per field with flags (:func:`~sago_fast.run.config.option`),
    typed from the field (a tuple is a repeatable option, a bool a flag), plus ``--config``; what is given
    on the command line overrides the YAML file."""
    parameters = [CONFIG_OPTION]
    hints = get_type_hints(config_class)
    for f in fields(config_class):
        flags = f.metadata.get("flags", ())
        if flags:
            kind = bool if hints[f.name] is bool else _cli_type(hints[f.name])
            default = False if kind is bool else None
            option = typer.Option(*flags, help=f.metadata["help"])
            parameters.append(
                inspect.Parameter(
                    f.name,
                    inspect.Parameter.KEYWORD_ONLY,
                    default=default,
                    annotation=Annotated[kind, option],
                )
            )

    def run_command(config: Path | None = None, **options: Any) -> None:
        given = {name: _config_value(config_class, name, value) for name, value in options.items()}
        _run(
            config_class.from_yaml(config, **given)
            if config is not None
            else config_class(**{k: v for k, v in given.items() if v is not None})
        )

    run_command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    run_command.__annotations__ = {p.name: p.annotation for p in parameters}
    run_command.__doc__ = __doc__
    return run_command


def _cli_type(hint: Any) -> Any:
    """The command-line type of a field's type: optional (absent: not given), a tuple as a list."""
    kinds = [
        k
        for k in (get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,))
        if k is not type(None)
    ]
    kind = kinds[0]
    return (list[str] if get_origin(kind) is tuple else kind) | None


def _config_value(config_class: type[RunConfig], name: str, value: Any) -> Any:
    """A command-line value as the field takes it: None when not given (a flag left off included), a list
    as a tuple, ``--no-stats`` as ``stats=False``, ``--stop '\\n'`` as a newline."""
    if value is None or value is False or value == []:
        return None
    flags = config_class.__dataclass_fields__[name].metadata["flags"]
    if value is True:
        return not flags[0].startswith("--no-")
    if isinstance(value, list):
        value = tuple(value)
        if name == "stop":
            value = tuple(v.replace("\\n", "\n").replace("\\t", "\t") for v in value)
    return value


def _run(run_config: RunConfig) -> None:
    from sago_fast.run import run
    from sago_fast.run.pipeline import UnitsFailedError

    try:
        result = run(run_config, light_start=True)
    except UnitsFailedError as exc:  # what did run is shown before the error line
        if exc.result is not None and (exc.result.units or exc.result.skipped):
            _print_result(exc.result, run_config)
        raise
    _print_result(result, run_config)


def _print_result(result: RunResult, run_config: RunConfig) -> None:
    """The run summary (the units in the results file), why sequential units stopped, and the run line."""
    from sago_fast.cli.query import render_table
    from sago_fast.store import Store
    from sago_fast.store.queries import summary_rows
    from sago_fast.store.reads import RunReads

    if result.db_path is None:
        typer.echo(f"{result.describe()}; shard {run_config.shard} -> {result.shard_dir}")
        return
    with Store(result.db_path, read_only=True) as store:
        columns, rows = summary_rows(store, result.run_id)
        reads = RunReads(store, result.run_id)
        sequential, separations = reads.sequential_units(), reads.separations()
        designs = reads.designs()
    typer.echo(render_table(columns, rows))
    say_design(designs)
    if sequential.rows:
        typer.echo("\nsequential units (why each stopped; see confidence_sequences):")
        typer.echo(render_table(sequential.columns, sequential.rows))
    if separations.rows:
        typer.echo("\ncomparisons of neighbouring models (b - a; see comparison_sequences):")
        typer.echo(render_table(separations.columns, separations.rows))
    typer.echo(f"\n{result.describe()} -> {Path(result.db_path).resolve()}")


def say_design(designs: list[str]) -> None:
    """One line naming a sampled design (a full design says nothing: it is what every figure always was)."""
    if designs and designs != ["full"]:
        typer.echo(
            f"design: {', '.join(designs)} (every item's canonical rendering and m of its meaning-preserving "
            "families; every figure estimates what the full design gives on the same items)"
        )


run_command = run_command_for(RunConfig)
