"""Worked examples played on a real environment once per configuration and shown as chat turns (``env.mcp.examples``,
``env.openenv.examples``): the agent and the explorer see the environment's real outputs."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from pydantic import BaseModel

from evolvekit.env.action_text import format_call
from evolvekit.env.bfcl.families import Demonstration
from evolvekit.types import ChatMessage, ToolCall

E = TypeVar("E")
Played = tuple[str, list[tuple[ToolCall, str]], str]  # (request, [(call, output), ...], closing message)
_CACHE: dict[str, list[ChatMessage]] = {}


def played_examples(section: BaseModel, examples: Sequence[E], play: Callable[[int, E], Played]) -> list[ChatMessage]:
    """The chat turns of ``examples``, each played by ``play(index, example)`` on a fresh instance; cached per
    configuration ``section`` (its class and values), so a run plays them once."""
    if not examples:
        return []
    blob = json.dumps([type(section).__name__, section.model_dump()], sort_keys=True, default=str)
    key = hashlib.sha256(blob.encode()).hexdigest()
    if key not in _CACHE:
        messages: list[ChatMessage] = []
        for i, example in enumerate(examples):
            request, steps, final = play(i, example)
            demo = Demonstration(request, steps[0][0], steps[0][1], final, then=tuple(steps[1:]))
            messages += demo.messages(format_call)
        _CACHE[key] = messages
    return list(_CACHE[key])


class ShownExamples:
    """An environment whose resets show the worked examples the run chose (``env.worked_examples``) instead of its
    own: ``examples()`` is read at every reset, so examples the run makes after building its environments (its own,
    from exploration) reach every later episode. Everything else is the wrapped environment's, attributes included
    (set and read through), so capability checks (``StateKeyed``, ``ReferenceDistances``) see the real one."""

    def __init__(self, inner, examples: Callable[[], Sequence[ChatMessage]]) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_examples", examples)

    def reset(self, task=None, sandbox_config=None):
        result = self._inner.reset(task, sandbox_config)
        return result.model_copy(update={"examples": list(self._examples())})

    def __getattr__(self, name: str):
        return getattr(object.__getattribute__(self, "_inner"), name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self._inner, name, value)


class Once:
    """A list made by ``make()`` the first time it is asked for (under a lock), the same list every time after: the
    run's own worked examples are made when the first environment resets, so building a run or an evaluation loads
    no explorer, an evaluation with nothing left to run explores nothing, and a resumed run reads them from its
    store."""

    def __init__(self, make: Callable[[], list]) -> None:
        self._make, self._lock = make, threading.Lock()
        self._value: list | None = None

    def __call__(self) -> list:
        with self._lock:
            if self._value is None:
                self._value = self._make()
            return list(self._value)


def unwrapped(env):
    """The environment inside any ``ShownExamples`` wrappers (itself when it has none)."""
    while isinstance(env, ShownExamples):
        env = object.__getattribute__(env, "_inner")
    return env
