"""Name → function registries (veRL's ``register_adv_est`` style), shared by the advantage estimators
(train/advantages.py) and the step-credit sources (attributing/sources.py)."""

from __future__ import annotations

from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)


def registrar(table: dict[str, F], kind: str, name: str, reserved: tuple[str, ...] = ()) -> Callable[[F], F]:
    """A decorator that registers its function in ``table`` under ``name``; a second function under a name taken
    already, or a ``reserved`` name, is refused (``kind`` names the registry in the error)."""

    def add(fn: F) -> F:
        if name in reserved:
            raise ValueError(f"'{name}' is reserved, not a {kind}")
        if name in table and table[name] is not fn:
            raise ValueError(f"{kind} '{name}' is already registered")
        table[name] = fn
        return fn

    return add
