"""One small generic registry: register once, reject duplicates, answer unknown names with suggestions."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from sago_fast.errors import SagoError

T = TypeVar("T")


class UnknownNameError(SagoError, KeyError):
    """An unknown registry name; the message carries a "did you mean" suggestion."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class Registry(Generic[T]):
    """A named collection of extension points (architectures, perturbation families, metrics...)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@REGISTRY.register("name")``. A second registration of a name is an error."""

        def add(item: T) -> T:
            self.add(name, item)
            return item

        return add

    def add(self, name: str, item: T) -> None:
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._items[name] = item

    def remove(self, name: str) -> T:
        """Unregister ``name`` (a plugin or a test that registered it temporarily); returns the item."""
        return self._items.pop(name)

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            close = difflib.get_close_matches(name, self._items, n=3)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            known = ", ".join(sorted(self._items))
            raise UnknownNameError(f"unknown {self.kind} {name!r}{hint} (known: {known})") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)
