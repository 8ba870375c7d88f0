"""Option labels per enumerator: what a rendering shows before an option, and what a ``letter`` answer names."""

from __future__ import annotations

ROMAN = ("i", "ii", "iii", "iv", "v", "vi", "vii", "viii", "ix", "x")


def option_label(position: int, enumerator: str) -> str:
    """Displayed label of option ``position`` (0-based)."""
    if enumerator == "upper":
        return f"{chr(65 + position)}."
    if enumerator == "paren":
        return f"({chr(97 + position)})"
    if enumerator == "number":
        return f"{position + 1})"
    if enumerator == "roman":
        return f"{ROMAN[position]}."
    raise ValueError(f"unknown enumerator {enumerator!r}")


def answer_label(position: int, enumerator: str) -> str:
    """The label a ``letter`` answer names for option ``position``: the displayed label without its
    punctuation ("A." -> "A", "(a)" -> "a", "1)" -> "1", "i." -> "i")."""
    return option_label(position, enumerator).strip("().")
