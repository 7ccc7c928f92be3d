"""Task curation (AgentEvolver §3.3): real-time lexical + semantic dedup, and the feasibility replay.

Lexical overlap is the Jaccard overlap of lower-cased word sets (|A∩B| / |A∪B|); a task at or above the threshold
(0.8) against any kept task is a duplicate. Semantic dedup compares sentence embeddings (cosine ≥ 0.9). The
feasibility check replays the task's reference solution in a fresh environment and keeps the task only if every
call executes without an error and the environment's own check passes.

The grounding filter (evolvekit's own, off by default: not in the paper) measures how much of the reference
solution the request states: the share of its literal argument values (numbers, strings) that appear in the
request. "What is 57 plus 7?" with the reference add(50, 7) is grounded 0.5 — an agent reading it cannot find 50.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from evolvekit.env.base import Action, Environment
from evolvekit.types import Task

_WORD = re.compile(r"[a-z0-9_.]+")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def lexical_overlap(a: str, b: str) -> float:
    wa, wb = words(a), words(b)
    if not wa and not wb:
        return 1.0
    return len(wa & wb) / len(wa | wb)


@dataclass
class DedupResult:
    kept: list[Task]
    lexical_duplicates: int = 0
    semantic_duplicates: int = 0


class Deduplicator:
    """Real-time dedup against every task seen so far (existing tasks are added with ``seed``)."""

    def __init__(
        self,
        embed: Callable[[Sequence[str]], np.ndarray] | None,
        lexical_threshold: float = 0.8,
        semantic_threshold: float = 0.9,
    ) -> None:
        self.embed, self.lexical_threshold, self.semantic_threshold = embed, lexical_threshold, semantic_threshold
        self.texts: list[str] = []
        self.vectors: list[np.ndarray] = []

    def seed(self, tasks: Sequence[Task]) -> None:
        for t in tasks:
            self._keep("\n".join(t.turns))

    def _keep(self, text: str, vec: np.ndarray | None = None) -> None:
        self.texts.append(text)
        if self.embed is not None:
            self.vectors.append(vec if vec is not None else self.embed([text])[0])

    def filter(self, tasks: Sequence[Task]) -> DedupResult:
        out = DedupResult(kept=[])
        for t in tasks:
            text = "\n".join(t.turns)
            if any(lexical_overlap(text, other) >= self.lexical_threshold for other in self.texts):
                out.lexical_duplicates += 1
                continue
            vec = None
            if self.embed is not None:
                vec = self.embed([text])[0]
                if self.vectors and float(np.max(np.stack(self.vectors) @ vec)) >= self.semantic_threshold:
                    out.semantic_duplicates += 1
                    continue
            self._keep(text, vec)
            out.kept.append(t)
        return out


def replay_feasible(task: Task, make_env: Callable[[], Environment]) -> tuple[bool, str]:
    """Replay the reference solution turn by turn in a fresh environment; (feasible, reason)."""
    if not task.reference_solution:
        return False, "no reference solution"
    env = make_env()
    try:
        env.reset(task)
        for turn in task.reference_solution:
            for call in turn:
                res = env.step(Action(tool_calls=[call]))
                bad = [r for r in res.call_results if not r.ok]
                if bad or not res.call_results:
                    return False, f"{call.name}: {bad[0].output[:200] if bad else res.observation[:200]}"
            env.step(Action(text="done"))
        result = env.evaluate(None)
        return (result.score >= 1.0, "" if result.score >= 1.0 else f"check failed: {result.details}")
    except Exception as err:
        return False, f"{type(err).__name__}: {err}"
    finally:
        env.close()


def argument_values(value) -> list:
    """The literal leaves (numbers and non-empty strings) of an argument value; booleans and None are not stated
    as such in a request, so they do not count."""
    if isinstance(value, dict):
        return [v for x in value.values() for v in argument_values(x)]
    if isinstance(value, (list, tuple)):
        return [v for x in value for v in argument_values(x)]
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, (int, float)) or (isinstance(value, str) and value.strip()):
        return [value]
    return []


def grounding(task: Task) -> float:
    """Share of the reference solution's literal argument values that the request states (1.0 when it has none).

    A number counts when the request contains the same number; a string when it appears in the request, both
    case- and whitespace-insensitively.
    """
    text = " ".join(" ".join(task.turns).lower().split())
    numbers = {float(x) for x in _NUMBER.findall(text)}
    values = [v for turn in task.reference_solution or [] for call in turn for v in argument_values(call.arguments)]
    if not values:
        return 1.0
    stated = sum(
        (float(v) in numbers) if isinstance(v, (int, float)) else (" ".join(v.lower().split()) in text) for v in values
    )
    return stated / len(values)
