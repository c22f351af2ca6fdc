"""What the GPU and model catalogs share: entries looked up by a name as a spec spells it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Generic, Iterator, Mapping, TypeVar

T = TypeVar("T")


class NamedCatalog(ABC, Generic[T]):
    """A catalog whose entries a spec names. `get` resolves a spelling (None when unknown) and
    `suggest` the names close to an unknown one, each catalog in its own way; indexing raises a
    KeyError that offers those names, and `in`, iteration and `len` go by the catalog's names."""

    what: ClassVar[str]  # an entry, as an error names it ("GPU", "model")

    @abstractmethod
    def _entries(self) -> Mapping[str, T]:
        """The entries by catalog name, in the data file's order."""

    @abstractmethod
    def get(self, name: str) -> T | None: ...

    @abstractmethod
    def suggest(self, name: str, n: int = 3) -> list[str]: ...

    @property
    def names(self) -> list[str]:
        return list(self._entries())

    def __getitem__(self, name: str) -> T:
        entry = self.get(name)
        if entry is None:
            hint = self.suggest(name)
            raise KeyError(f"unknown {self.what} {name!r}" + (f"; did you mean {', '.join(hint)}?" if hint else ""))
        return entry

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[T]:
        return iter(self._entries().values())

    def __len__(self) -> int:
        return len(self._entries())
