"""User-written variants: a JSONL file of ``{"example_id", "variant_id", "family", "text", ...}``.

Optional fields: ``option_order`` (list, default identity), ``is_canonical`` (default: family ==
"canonical"), ``meaning_preserving`` (default true), ``hint_index``. Examples without a canonical variant
get the generated one. Errors name file, line and field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from sago_fast.errors import InputError
from sago_fast.types import Example, Variant
from sago_fast.variants.base import RenderSpec
from sago_fast.variants.generate import CANONICAL, make_variant


def read_user_variants(path: str | os.PathLike[str], examples: Sequence[Example]) -> list[Variant]:
    path = Path(path)
    by_id = {e.example_id: e for e in examples}
    variants: list[Variant] = []
    seen: set[str] = set()
    canonical_of: dict[str, int] = {}
    if not path.is_file():
        raise InputError(f"{path}: no such variants file")
    with path.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            where = f"{path}:{line_no}"
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{where}: not valid UTF-8 ({exc.reason})") from None
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError(f"{where}: malformed JSON ({exc.msg})") from None
            for field in ("example_id", "variant_id", "family", "text"):
                if not isinstance(record.get(field), str) or not record[field].strip():
                    raise InputError(f"{where}: field '{field}' is missing or empty")
            example = by_id.get(record["example_id"])
            if example is None:
                raise InputError(f"{where}: field 'example_id': unknown example {record['example_id']!r}")
            if record["variant_id"] in seen:
                raise InputError(f"{where}: field 'variant_id': duplicate {record['variant_id']!r}")
            seen.add(record["variant_id"])
            order = tuple(record.get("option_order", range(len(example.options))))
            if sorted(order) != list(range(len(example.options))):
                raise InputError(
                    f"{where}: field 'option_order' must be a permutation of 0..{len(example.options) - 1}"
                )
            is_canonical = bool(record.get("is_canonical", record["family"] == CANONICAL))
            if is_canonical:
                if example.example_id in canonical_of:
                    raise InputError(
                        f"{where}: field 'is_canonical': example {example.example_id!r} already has a canonical "
                        f"variant (line {canonical_of[example.example_id]})"
                    )
                canonical_of[example.example_id] = line_no
            variants.append(
                Variant(
                    example_id=example.example_id,
                    variant_id=record["variant_id"],
                    family=record["family"],
                    k=int(record.get("k", 0)),
                    params=json.dumps(record.get("params", {}), sort_keys=True),
                    is_canonical=is_canonical,
                    meaning_preserving=bool(record.get("meaning_preserving", True)),
                    prompt=record["text"],
                    option_order=order,
                    hint_index=record.get("hint_index"),
                )
            )
    if not variants:
        raise InputError(f"{path}: no variants (empty file)")
    for example in examples:
        if example.example_id not in canonical_of and any(
            v.example_id == example.example_id for v in variants
        ):
            base = RenderSpec.canonical(example)
            variants.append(make_variant(example, CANONICAL, 0, base, base, True))
    return variants
