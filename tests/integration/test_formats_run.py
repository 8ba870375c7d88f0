"""`sago run` on a published-format file equals the run on its SPEC-schema JSONL; --field in run and YAML."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sago_fast.errors import InputError
from sago_fast.run import RunConfig, run
from sago_fast.store import Store

ARC = [
    {
        "id": f"arc-{i}",
        "question": {
            "stem": f"Which number is {w}?",
            "choices": [
                {"label": "A", "text": str(i)},
                {"label": "B", "text": str(i + 7)},
                {"label": "C", "text": str(i + 3)},
            ],
        },
        "answerKey": "B",
    }
    for i, w in enumerate(["largest", "biggest", "highest"])
]


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def outputs(db):
    with Store(db, read_only=True) as store:
        _, rows = store.query(
            "SELECT variant_id, replicate, answer_index, option_logprobs FROM outputs ORDER BY variant_id, replicate"
        )
        _, readers = store.query("SELECT reader FROM datasets")
    return rows, readers


def run_on(dataset, db, checkpoints, cache_dir, **extra):
    config = RunConfig(
        models=(str(checkpoints["llama"]),),
        datasets=(str(dataset),),
        db=db,
        families=("option_permutation",),
        variants_per_family=1,
        cache_dir=cache_dir,
        stats=False,
        **extra,
    )
    run(config, progress=False)
    return outputs(db)


def assert_same_outputs(a, b):
    assert [r[:3] for r in a] == [r[:3] for r in b]
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x[3], y[3], atol=1e-5, rtol=0)


def test_published_format_and_field_mapping_give_the_spec_outputs(tmp_path, checkpoints, cache_dir):
    arc = write(tmp_path / "arc.jsonl", ARC)
    spec = write(
        tmp_path / "spec.jsonl",
        [
            {
                "id": r["id"],
                "question": r["question"]["stem"],
                "options": [c["text"] for c in r["question"]["choices"]],
                "answer": 1,
            }
            for r in ARC
        ],
    )
    nested = write(
        tmp_path / "nested.jsonl",
        [
            {
                "uid": r["id"],
                "q": {"stem": r["question"]["stem"], "opts": [c["text"] for c in r["question"]["choices"]]},
                "gold": 2,
            }
            for r in ARC
        ],
    )
    by_spec, readers = run_on(spec, tmp_path / "spec.duckdb", checkpoints, cache_dir)
    assert readers == [("sago",)]
    by_arc, readers = run_on(arc, tmp_path / "arc.duckdb", checkpoints, cache_dir)
    assert readers == [("arc",)]
    assert_same_outputs(by_arc, by_spec)
    fields = ("id=uid", "question=q.stem", "options=q.opts", "answer=gold", "answer_offset=1")
    by_field, _ = run_on(nested, tmp_path / "field.duckdb", checkpoints, cache_dir, fields=fields)
    assert_same_outputs(by_field, by_spec)
    # the same mapping from a YAML config
    config = tmp_path / "run.yaml"
    config.write_text(
        f"models: [{checkpoints['llama']}]\ndatasets: [{nested}]\ndb: {tmp_path / 'yaml.duckdb'}\n"
        f"families: [option_permutation]\nvariants_per_family: 1\nstats: false\ncache_dir: {cache_dir}\n"
        "fields: {id: uid, question: q.stem, options: q.opts, answer: gold, answer_offset: 1}\n",
        encoding="utf-8",
    )
    run(RunConfig.from_yaml(config), progress=False)
    assert_same_outputs(outputs(tmp_path / "yaml.duckdb")[0], by_spec)


def test_unknown_field_name_is_one_line(tmp_path):
    with pytest.raises(InputError, match=r"--field 'colour=q\.stem': expected NAME=SOURCE_FIELD"):
        RunConfig(models=("m",), datasets=("capitals",), db=tmp_path / "x.duckdb", fields=("colour=q.stem",))
