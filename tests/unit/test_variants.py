"""Variant generation: one canonical per example, determinism, stability under added examples, order mapping."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from sago_fast.datasets.builtin import SUITES
from sago_fast.types import Example
from sago_fast.variants import VariantConfig, generate_variants
from sago_fast.variants.generate import variants_to_jsonl
from sago_fast.variants.render import option_label


def test_exactly_one_canonical_per_example():
    examples = [e for s in SUITES.names() for e in SUITES.get(s).build(10)]
    variants = generate_variants(examples, VariantConfig(k=2))
    for example in examples:
        own = [v for v in variants if v.example_id == example.example_id]
        assert sum(v.is_canonical for v in own) == 1
        assert len({v.variant_id for v in own}) == len(own)


def test_adding_examples_changes_no_existing_variant():
    full = SUITES.get("capitals").build(40)
    config = VariantConfig(k=3, seed=7)
    small = generate_variants(full[10:20], config)
    big = generate_variants([full[0], *full[5:25][::-1]], config)  # more examples, other order
    by_id = {v.variant_id: v for v in big}
    assert all(by_id[v.variant_id] == v for v in small)


def test_same_seed_byte_identical_across_processes(tmp_path):
    code = (
        "import sys; from sago_fast.datasets.builtin import SUITES; "
        "from sago_fast.variants import VariantConfig, generate_variants; "
        "from sago_fast.variants.generate import variants_to_jsonl; "
        "sys.stdout.write(variants_to_jsonl(generate_variants(SUITES.get('arithmetic').build(15), VariantConfig(k=2, seed=3))))"
    )
    outputs = [
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": str(h)},
        ).stdout
        for h in (1, 2)
    ]
    here = variants_to_jsonl(
        generate_variants(SUITES.get("arithmetic").build(15), VariantConfig(k=2, seed=3))
    )
    assert outputs[0] == outputs[1] == here
    other_seed = variants_to_jsonl(
        generate_variants(SUITES.get("arithmetic").build(15), VariantConfig(k=2, seed=4))
    )
    assert other_seed != here


def _displayed_options(prompt: str, n: int, enumerator_labels: list[str]) -> list[str]:
    lines = prompt.split("\n")
    shown = []
    for label in enumerator_labels[:n]:
        # the last line that starts with this label belongs to the question (shots come first)
        shown.append([line for line in lines if line.startswith(label + " ")][-1][len(label) + 1 :])
    return shown


options_strategy = st.lists(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8),
    min_size=2,
    max_size=6,
    unique=True,
)


@settings(max_examples=60, deadline=None)
@given(options=options_strategy, data=st.data(), seed=st.integers(0, 10_000))
def test_displayed_answer_maps_back_to_content(options, data, seed):
    gold = data.draw(st.integers(0, len(options) - 1))
    task = "pairwise" if len(options) == 2 and data.draw(st.booleans()) else "multiple_choice"
    example = Example("x", task, "Which one?", tuple(options), gold)
    for variant in generate_variants([example], VariantConfig(k=3, seed=seed)):
        params = variant.params
        enumerator = "upper"
        for name in ("paren", "number", "roman"):
            if f'"enumerator": "{name}"' in params:
                enumerator = name
        labels = [option_label(i, enumerator) for i in range(len(options))]
        shown = _displayed_options(variant.prompt, len(options), labels)
        for position, content in enumerate(shown):
            assert example.options[variant.option_order[position]] == content
        gold_position = variant.option_order.index(gold)
        assert shown[gold_position] == options[gold]


def test_user_written_variants(tmp_path):
    import json

    import pytest

    from sago_fast.errors import InputError
    from sago_fast.variants.user import read_user_variants

    examples = [
        Example("q1", "multiple_choice", "Q?", ("a", "b", "c"), 2),
        Example("q2", "multiple_choice", "R?", ("x", "y"), 0),
    ]
    path = tmp_path / "v.jsonl"
    rows = [
        {
            "example_id": "q1",
            "variant_id": "q1-mine",
            "family": "reworded",
            "text": "Pick one: a, b or c?",
            "option_order": [2, 0, 1],
        },
        {"example_id": "q1", "variant_id": "q1-canon", "family": "canonical", "text": "Q? a b c"},
        {
            "example_id": "q2",
            "variant_id": "q2-mine",
            "family": "reworded",
            "text": "R? x or y",
            "meaning_preserving": False,
        },
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    variants = read_user_variants(path, examples)
    by_id = {v.variant_id: v for v in variants}
    assert by_id["q1-mine"].option_order == (2, 0, 1) and not by_id["q1-mine"].is_canonical
    assert by_id["q1-canon"].is_canonical
    assert not by_id["q2-mine"].meaning_preserving
    assert sum(v.is_canonical for v in variants if v.example_id == "q2") == 1  # generated canonical added
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**rows[0], "option_order": [0, 0, 1]}) + "\n")
    with pytest.raises(InputError, match=r"bad.jsonl:1: field 'option_order'"):
        read_user_variants(bad, examples)
    bad.write_text(json.dumps({**rows[0], "example_id": "zz"}) + "\n")
    with pytest.raises(InputError, match=r"bad.jsonl:1: field 'example_id': unknown example"):
        read_user_variants(bad, examples)
    bad.write_text(json.dumps(rows[1]) + "\n" + json.dumps({**rows[1], "variant_id": "again"}) + "\n")
    with pytest.raises(InputError, match=r"bad.jsonl:2: field 'is_canonical'"):
        read_user_variants(bad, examples)


def _pool(n):
    return [
        Example(f"x{i}", "multiple_choice", f"What is {i} plus one?", (str(i + 1), str(i + 2)), 0)
        for i in range(n)
    ]


def test_fewshot_draws_are_seeded_and_never_the_example_itself():
    import pytest

    from sago_fast.errors import InputError
    from sago_fast.variants.generate import draw_shots

    examples = _pool(6)
    config = VariantConfig(families=(), num_fewshot=3, seed=7)
    for example in examples:
        shots = draw_shots(example, examples, config, "pool")
        assert len(shots) == 3 and example not in shots and len(set(shots)) == 3
        assert draw_shots(example, list(reversed(examples)), config, "pool") != ()  # any order works
        assert draw_shots(example, examples, config, "pool") == shots  # seeded
    # the canonical prompt carries the demonstrations, then the question
    variants = generate_variants(examples, config)
    assert all(v.prompt.count("Question:") == 4 for v in variants)
    # demonstrations from a separate pool
    dev = _pool(10)[6:]
    from_dev = generate_variants(
        examples[:1], VariantConfig(families=(), num_fewshot=2, fewshot_pool=tuple(dev))
    )
    assert any(f"What is {i} plus one?" in from_dev[0].prompt for i in range(6, 10))
    with pytest.raises(InputError, match="--num-fewshot 6 needs 6 other"):
        generate_variants(examples, VariantConfig(families=(), num_fewshot=6), "tiny.jsonl")


def test_system_prompt_family_only_with_a_chat_template():
    import pytest

    from sago_fast.errors import InputError

    assert "system_prompt" not in VariantConfig().family_names()
    assert "system_prompt" in VariantConfig(chat=True).family_names()
    with pytest.raises(InputError, match="needs a chat template"):
        VariantConfig(families=("system_prompt",)).family_names()
    variants = generate_variants(_pool(1), VariantConfig(families=("system_prompt",), chat=True))
    assert variants[0].system_prompt is None and variants[1].system_prompt
