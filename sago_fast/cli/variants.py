"""List perturbation families, preview variants of a dataset, or write them to JSONL."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

variants_app = typer.Typer(help=__doc__, no_args_is_help=True)

DatasetOpt = Annotated[
    str, typer.Option("--dataset", "-d", help="Built-in suite name or .jsonl/.csv/.parquet path.")
]
FamilyOpt = Annotated[
    list[str] | None, typer.Option("--family", "-F", help="Family to use (repeatable; default all).")
]
FieldOpt = Annotated[
    list[str] | None,
    typer.Option("--field", help="Map a field name: NAME=SOURCE, e.g. question=stem (repeatable)."),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the variant streams.")]
KOpt = Annotated[int, typer.Option("--variants-per-family", "-k", help="Variants per family per example.")]


def _config(family: list[str] | None, k: int, seed: int):
    from sago_fast.errors import SagoError
    from sago_fast.variants import VariantConfig

    if k < 1:
        raise SagoError(f"--variants-per-family must be positive, not {k}")
    config = VariantConfig(families=tuple(family) if family else None, k=k, seed=seed)
    config.family_names()  # validates names ("did you mean")
    return config


@variants_app.command("list")
def list_command() -> None:
    """Registered families with a one-line description and an input → output example."""
    from sago_fast.variants import FAMILIES

    for name in FAMILIES.names():
        family = FAMILIES.get(name)
        flag = "" if family.meaning_preserving else "  [not meaning preserving]"
        typer.echo(f"{name:<20} {family.description}{flag}")
        typer.echo(f"{'':<20} e.g. {family.example}")


@variants_app.command("preview")
def preview_command(
    dataset: DatasetOpt,
    family: FamilyOpt = None,
    n: Annotated[int, typer.Option("-n", help="Examples to show.")] = 1,
    k: KOpt = 1,
    seed: SeedOpt = 0,
    field: FieldOpt = None,
) -> None:
    """Show the rendered variants of the first N examples."""
    from sago_fast.datasets import FieldMap
    from sago_fast.datasets.load import load_dataset
    from sago_fast.variants import generate_variants

    data = load_dataset(dataset, fields=FieldMap.parse(field or []), limit=n)
    for variant in generate_variants(data.examples, _config(family, k, seed)):
        if family and variant.family not in family and not variant.is_canonical:
            continue
        marker = " (canonical)" if variant.is_canonical else ""
        typer.echo(
            f"=== {variant.variant_id}{marker} params={variant.params} order={list(variant.option_order)}"
        )
        typer.echo(variant.prompt)


@variants_app.command("write")
def write_command(
    dataset: DatasetOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="JSONL file to write.")],
    family: FamilyOpt = None,
    k: KOpt = 2,
    seed: SeedOpt = 0,
    limit: Annotated[int | None, typer.Option("--limit", help="Use only the first N examples.")] = None,
    field: FieldOpt = None,
) -> None:
    """Write every variant of a dataset to JSONL (written to a temp name, then renamed)."""
    from sago_fast.atomic import atomic_path, check_writable
    from sago_fast.datasets import FieldMap
    from sago_fast.datasets.load import load_dataset
    from sago_fast.variants import generate_variants
    from sago_fast.variants.generate import variants_to_jsonl

    check_writable(out, what="--out")
    data = load_dataset(dataset, fields=FieldMap.parse(field or []), limit=limit)
    variants = generate_variants(data.examples, _config(family, k, seed))
    with atomic_path(out) as tmp:
        tmp.write_text(variants_to_jsonl(variants), encoding="utf-8")
    typer.echo(
        f"wrote {len(variants)} variants of {len(data.examples)} examples ({data.dataset_id}) to {out}"
    )
