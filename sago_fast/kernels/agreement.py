"""Agreement between generations given as token-id sequences: exact match and token-F1 (SQuAD-style)."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and English articles, collapse whitespace (the SQuAD normalisation)."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


def number_key(text: str) -> str:
    """The usual GSM8K normalisation of a number: no thousands separators, no trailing '.0'."""
    number = text.replace(",", "").strip()
    return number[:-2] if number.endswith(".0") else number


def answer_key(text: str) -> str:
    """Comparison form of a short answer: :func:`normalize_answer`, or, when that leaves nothing (the
    answer *is* "a" or "the"), lower case without punctuation. Equal keys mean the same answer."""
    return normalize_answer(text) or " ".join(text.lower().translate(_PUNCT).split())


def exact_match(a: Sequence[int], b: Sequence[int]) -> float:
    """1.0 if the two token sequences are identical, else 0.0."""
    return 1.0 if list(a) == list(b) else 0.0


def token_f1(a: Sequence[int], b: Sequence[int]) -> float:
    """Harmonic mean of precision and recall of the multiset of tokens; 1.0 for two empty sequences."""
    if len(a) == 0 and len(b) == 0:
        return 1.0
    common = sum((Counter(a) & Counter(b)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(a), common / len(b)
    return 2 * precision * recall / (precision + recall)


def pairwise_agreement(sequences: Sequence[Sequence[int]], measure: str = "token_f1") -> np.ndarray:
    """Condensed (n*(n-1)/2,) agreement between every pair of sequences, in scipy ``pdist`` order."""
    fn = {"exact_match": exact_match, "token_f1": token_f1}[measure]
    n = len(sequences)
    return np.array(
        [fn(sequences[i], sequences[j]) for i in range(n - 1) for j in range(i + 1, n)], dtype=np.float64
    )
