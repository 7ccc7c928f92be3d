"""Task curation (AgentEvolver §3.3): real-time lexical + semantic dedup, and the feasibility replay.

Lexical overlap is the Jaccard overlap of lower-cased word sets (|A∩B| / |A∪B|); a task at or above the threshold
(0.8) against any kept task is a duplicate. Semantic dedup compares sentence embeddings (cosine ≥ 0.9). The
feasibility check replays the task's reference solution in a fresh environment and keeps the task only if every
call executes without an error and the environment's own check passes.

The grounding filter (evolvekit's own, off by default: not in the paper) measures how much of the reference
solution the request states: the share of its literal argument values (numbers, strings) that appear in the
request. "What is 57 plus 7?" with the reference add(50, 7) is grounded 0.5 — an agent reading it cannot find 50.
Two stricter checks (also evolvekit's own, off by default) catch the requests a 135M synthesizer writes most often
(benchmarks/results/synthetic_task_audit.md): exact numbers — the request states exactly the reference's numbers,
each as often as the calls use it and no other ("Multiply that by -1." for add(-1, -1) states -1 once and asks
for another operation); tool agreement — each turn's reference tools are the tools whose name and description
are closest to the turn's request in the embedding space ("Compute the sum of 3 and 5." for multiply(3, 5) is
dropped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from evolvekit.env.base import Action, Environment, ToolSchema
from evolvekit.errors import EnvError
from evolvekit.types import Task, ToolCall

_WORD = re.compile(r"[a-z0-9_.]+")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


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


def replay_feasible(
    task: Task, make_env: Callable[[], Environment], refuse_invalid: bool = False, keep_positive: bool = False
) -> tuple[bool, str]:
    """Replay the reference solution turn by turn in a fresh environment; (feasible, reason). ``refuse_invalid``:
    a task the environment refuses at reset (a reference naming no tool of it, a non-finite or out-of-bounds
    argument) raises its ``EnvError`` instead of counting as infeasible. ``keep_positive`` (CoEvolve §3.3: "if
    execution fails but the environment returns a positive reward, the task is also retained"): a failing call does
    not end the replay, and a check that fails with a score above 0 still makes the task feasible (its reason says
    so); off, every call must work and the check must pass."""
    if not task.reference_solution:
        return False, "no reference solution"
    env = make_env()
    reset_done = False
    try:
        env.reset(task)
        reset_done = True
        failed = ""
        for turn in task.reference_solution:
            for call in turn:
                res = env.step(Action(tool_calls=[call]))
                bad = [r for r in res.call_results if not r.ok]
                if bad or not res.call_results:
                    failed = failed or f"{call.name}: {bad[0].output[:200] if bad else res.observation[:200]}"
                    if not keep_positive:
                        return False, failed
            env.step(Action(text="done"))
        result = env.evaluate(None)
        if result.score >= 1.0 and not failed:
            return True, ""
        if keep_positive and result.score > 0:
            return True, f"kept with a positive reward ({result.score:g}): {failed or 'check failed'}"
        return False, failed or f"check failed: {result.details}"
    except EnvError as err:
        if refuse_invalid and not reset_done:
            raise
        return False, f"{type(err).__name__}: {err}"
    except Exception as err:
        return False, f"{type(err).__name__}: {err}"
    finally:
        env.close()


def passes_without_acting(task: Task, make_env: Callable[[], Environment]) -> bool:
    """Whether the environment's own check passes an episode of ``task`` in which the agent only answers in text, one
    answer per turn and no call: such a task (a read-only request whose state check cannot tell doing nothing from
    doing it) teaches nothing and is not well-posed. An environment that fails the episode counts as not passing."""
    env = make_env()
    try:
        env.reset(task)
        for _ in task.reference_solution or [[]]:
            env.step(Action(text="done"))
        return env.evaluate(None).score >= 1.0
    except Exception:
        return False
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
    case- and whitespace-insensitively. A task with one request per reference turn is checked turn by turn: a value
    counts only when its own turn states it ("Add 15 and 5." then "Multiply that by 2." does not state add(20, 5)'s
    5 in the turn that needs it).
    """
    turns, refs = task.turns, task.reference_solution or []
    carried = carried_values(task)
    carried += [[] for _ in range(len(refs) - len(carried))]
    if len(turns) == len(refs) > 1:
        pairs = list(zip(turns, refs, carried))
    else:
        pairs = [(" ".join(turns), [c for t in refs for c in t], [v for vs in carried for v in vs])]
    stated = total = 0
    for text, calls, taken in pairs:
        values = _without(taken, [v for call in calls for v in argument_values(call.arguments)])
        total += len(values)
        stated += stated_count(text, values)
    return stated / total if total else 1.0


def stated_count(text: str, values: Sequence) -> int:
    """How many of ``values`` the text states: a number when the text contains the same number, a string when it
    appears in the text (case- and whitespace-insensitively)."""
    text = " ".join(text.lower().split())
    numbers = {float(x) for x in NUMBER.findall(text)}
    return sum(
        (float(v) in numbers) if isinstance(v, (int, float)) else (" ".join(v.lower().split()) in text) for v in values
    )


def carried_values(task: Task) -> list[list]:
    """Per reference turn, the argument values it takes from an earlier call's result rather than from its request
    (a multi-turn synthetic task's ``metadata["carried_values"]``, questioning/synthesize.py); [] for other tasks."""
    raw = task.metadata.get("carried_values") or []
    return [list(vs) if isinstance(vs, list) else [] for vs in raw] if isinstance(raw, list) else []


def _without(carried: list, values: list) -> list:
    """``values`` less the ``carried`` ones that occur in them, once each."""
    values = list(values)
    for c in carried:
        hit = next((i for i, v in enumerate(values) if same_value(v, c)), None)
        if hit is not None:
            del values[hit]
    return values


def reference_values(task: Task) -> list:
    """The literal argument values of every call of the task's reference solution that its request must state, in
    order: a multi-turn synthetic task's later turns take some values from an earlier call's result
    (``carried_values``), and those are left out, once each."""
    values = [v for turn in task.reference_solution or [] for call in turn for v in argument_values(call.arguments)]
    return _without([v for vs in carried_values(task) for v in vs], values)


def same_value(a, b) -> bool:
    """Two literal argument values are the same: numbers by value (3 and 3.0), strings without surrounding spaces."""
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    return isinstance(a, str) and isinstance(b, str) and a.strip() == b.strip()


def numbers_exact(task: Task) -> bool:
    """The request states exactly its reference's numbers: the numbers in its turns, as a multiset, equal the
    numeric argument values of its reference calls (each value as often as the calls use it, and no other number).
    "Add 3 and 3." for add(3, 3) passes; "Multiply that by -1." for add(-1, -1) and "Add 2 and 5, then 4." for
    add(2, 5) do not."""
    stated = sorted(float(x) for x in NUMBER.findall(" ".join(task.turns)))
    return stated == sorted(float(v) for v in reference_values(task) if isinstance(v, (int, float)))


class ToolAgreement:
    """Whether a synthesized request asks for the tools its reference uses (evolvekit's own curation check).

    Each tool is embedded as "name: description"; a turn's request agrees with its reference when the reference's
    distinct tools are exactly its k most similar tools (cosine, k = the number of distinct tools the turn calls).
    A task whose request is one text for several reference turns is compared with all of their tools at once.
    """

    def __init__(self, embed: Callable[[Sequence[str]], np.ndarray], tools: Sequence[ToolSchema]) -> None:
        self.embed = embed
        self.names = [t.name for t in tools]
        self.vectors = embed([f"{t.name}: {t.description}" for t in tools]) if tools else np.zeros((0, 1))

    def agrees(self, task: Task) -> bool:
        turns = task.turns
        refs = task.reference_solution or []
        pairs = list(zip(turns, refs)) if len(turns) == len(refs) else [(" ".join(turns), [c for t in refs for c in t])]
        return all(self.turn_agrees(text, calls) for text, calls in pairs)

    def turn_agrees(self, text: str, calls: Sequence[ToolCall]) -> bool:
        """One request against the calls that answer it: their distinct tools are its k most similar tools."""
        need = {c.name for c in calls}
        if not need:
            return True
        if not need <= set(self.names):
            return False
        sims = self.vectors @ self.embed([text])[0]
        return {self.names[int(i)] for i in np.argsort(-sims, kind="stable")[: len(need)]} == need
