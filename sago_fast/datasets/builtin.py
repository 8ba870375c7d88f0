"""Built-in benchmark suites, generated deterministically by code (no downloads).

Example i of a suite is drawn from its own random stream (seed, suite, i), so asking for more examples
never changes the first ones.

| suite | task type | skill |
| --- | --- | --- |
| arithmetic | multiple_choice | addition/subtraction of small numbers |
| capitals | multiple_choice | factual lookup over the shipped country/capital table |
| comparison | pairwise | which of two numbers is larger/smaller (verdict must follow a swap) |
| letters | generation | letter manipulation: first/last letter, length, reversal of short words |
"""

from __future__ import annotations

import csv
import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

import numpy as np

from sago_fast.registry import Registry
from sago_fast.types import Example


@dataclass(frozen=True)
class Suite:
    name: str
    task_type: str
    skill: str
    default_size: int
    make: Callable[[int, np.random.Generator], Example]  # (index, rng) -> example

    def build(self, n: int | None = None, seed: int = 0) -> list[Example]:
        """The first ``n`` examples (default ``default_size``)."""
        count = self.default_size if n is None else n
        return [self.make(i, example_rng(seed, self.name, i)) for i in range(count)]


SUITES: Registry[Suite] = Registry("built-in dataset")


def example_rng(seed: int, suite: str, index: int) -> np.random.Generator:
    digest = hashlib.sha256(f"{seed}\x1f{suite}\x1f{index}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _shuffle_with_gold(
    rng: np.random.Generator, gold: str, distractors: list[str]
) -> tuple[tuple[str, ...], int]:
    options = [gold, *distractors]
    order = rng.permutation(len(options))
    shuffled = tuple(options[i] for i in order)
    return shuffled, shuffled.index(gold)


def _arithmetic(i: int, rng: np.random.Generator) -> Example:
    a, b = int(rng.integers(0, 40)), int(rng.integers(0, 40))
    if rng.random() < 0.5:
        question, result = f"What is {a} + {b}?", a + b
    else:
        a, b = max(a, b), min(a, b)
        question, result = f"What is {a} - {b}?", a - b
    candidates = [result + d for d in (-10, -2, -1, 1, 2, 10) if result + d >= 0]
    picked = rng.choice(len(candidates), size=3, replace=False)
    distractors = [str(candidates[j]) for j in picked]
    options, gold = _shuffle_with_gold(rng, str(result), distractors)
    return Example(f"arithmetic-{i:05d}", "multiple_choice", question, options, gold)


@functools.lru_cache(maxsize=1)
def capitals_table() -> tuple[dict[str, str], ...]:
    """The shipped table: country, capital, continent (105 rows)."""
    text = resources.files("sago_fast.datasets").joinpath("data/capitals.csv").read_text(encoding="utf-8")
    return tuple(csv.DictReader(text.splitlines()))


def _capitals(i: int, rng: np.random.Generator) -> Example:
    table = capitals_table()
    row = table[(i // 2) % len(table)]
    same = [r for r in table if r["continent"] == row["continent"] and r is not row]
    if len(same) < 3:  # small continents draw distractors from the whole table
        same = [r for r in table if r is not row]
    picks = [same[j] for j in rng.choice(len(same), size=3, replace=False)]
    if i % 2 == 0:
        question = f"What is the capital of {row['country']}?"
        options, gold = _shuffle_with_gold(rng, row["capital"], [p["capital"] for p in picks])
    else:
        question = f"{row['capital']} is the capital of which country?"
        options, gold = _shuffle_with_gold(rng, row["country"], [p["country"] for p in picks])
    return Example(f"capitals-{i:05d}", "multiple_choice", question, options, gold)


def _comparison(i: int, rng: np.random.Generator) -> Example:
    a, b = (int(x) for x in rng.choice(np.arange(1, 100), size=2, replace=False))
    larger = rng.random() < 0.5
    question = "Which number is larger?" if larger else "Which number is smaller?"
    gold = int((a < b) if larger else (a > b))  # 0 = item a, 1 = item b
    return Example(f"comparison-{i:05d}", "pairwise", question, (str(a), str(b)), gold)


WORDS = (
    "cat dog sun moon tree book door lamp milk fish bird rain snow wind fire road ship star king ring "
    "hand foot leaf rose salt gold iron wolf bear frog duck goat lion mouse horse table chair plant "
    "water bread apple stone cloud river ocean train light sound paper glass clock dream green"
).split()


def _letters(i: int, rng: np.random.Generator) -> Example:
    word = WORDS[int(rng.integers(len(WORDS)))]
    kind = int(rng.integers(4))
    if kind == 0:
        prompt, answer = f"What is the first letter of the word '{word}'?", word[0]
    elif kind == 1:
        prompt, answer = f"What is the last letter of the word '{word}'?", word[-1]
    elif kind == 2:
        prompt, answer = f"How many letters are in the word '{word}'?", str(len(word))
    else:
        prompt, answer = f"Spell the word '{word}' backwards.", word[::-1]
    return Example(f"letters-{i:05d}", "generation", prompt, answers=(answer,))


SUITES.add("arithmetic", Suite("arithmetic", "multiple_choice", "addition/subtraction", 240, _arithmetic))
SUITES.add("capitals", Suite("capitals", "multiple_choice", "factual lookup (shipped table)", 210, _capitals))
SUITES.add("comparison", Suite("comparison", "pairwise", "number comparison", 240, _comparison))
SUITES.add("letters", Suite("letters", "generation", "letter manipulation", 240, _letters))
