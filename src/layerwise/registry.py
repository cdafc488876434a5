"""Named registries: poolers, objectives, dropout strategies, tasks.

A new component is one decorated class or function; the CLI choices, config validation and the
parametrised tests read the names from here.
"""
from __future__ import annotations

import importlib
from typing import Callable, Generic, Iterator, TypeVar

from layerwise.errors import unknown_name

T = TypeVar("T")


class Registry(Generic[T]):
    """A mapping from names to components, with a decorator to fill it."""

    def __init__(self, kind: str, modules: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._modules = modules  # imported on first lookup: they fill the registry with the built-ins

    def _load(self) -> None:
        while self._modules:
            module, self._modules = self._modules[0], self._modules[1:]
            importlib.import_module(module)

    def register(self, name: str) -> Callable[[T], T]:
        def decorate(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._items[name] = item
            return item

        return decorate

    def get(self, name: str) -> T:
        self._load()
        if name not in self._items:
            raise unknown_name(self.kind, name, self._items)
        return self._items[name]

    def names(self) -> list[str]:
        self._load()
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        self._load()
        return iter(self._items)


POOLERS: Registry = Registry("pooler", ("layerwise.modeling.poolers",))
OBJECTIVES: Registry = Registry("objective", ("layerwise.training.embed",))
DROPOUT_STRATEGIES: Registry = Registry("dropout strategy")
TASKS: Registry = Registry("task")
