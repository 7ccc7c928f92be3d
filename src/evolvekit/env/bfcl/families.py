"""Task families: a BFCL backend restricted to a few tools, with worked examples shown as real chat turns.

A family is what makes learning visible for a small policy (FACTS.md, "What SmolLM2-135M can do"): on all 17
MathAPI tools SmolLM2-135M is correct in ~0-1% of samples, on the four arithmetic tools with three chat-turn
examples in ~30% — the band where GRPO learns. Tasks of a family run on the real BFCL backend and are scored
by the official multi-turn checker, exactly like the benchmark's own tasks.

The ``arith`` family's training and held-out tasks are generated procedurally from disjoint seeds: they are a
fixed, documented *benchmark* for the CPU baseline (benchmarks/learning_grpo.py), not the product's task source
— self-questioning synthesises tasks for any family from exploration of its sandbox.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from evolvekit.errors import EnvError
from evolvekit.types import ChatMessage, Task, TaskSource, ToolCall


@dataclass(frozen=True)
class Demonstration:
    """One worked episode: the request, the call, the tool's answer, and the closing message."""

    request: str
    call: ToolCall
    result: str
    final: str

    def messages(self, call_format: Callable[[ToolCall], str]) -> list[ChatMessage]:
        return [ChatMessage(role="user", content=self.request),
                ChatMessage(role="assistant", content=call_format(self.call)),
                ChatMessage(role="user", content=f"Tool results:\n[{self.call.name}] {self.result}"),
                ChatMessage(role="assistant", content=self.final)]


@dataclass(frozen=True)
class TaskFamily:
    name: str
    classes: tuple[str, ...]
    tools: tuple[str, ...]
    description: str
    demonstrations: tuple[Demonstration, ...] = ()
    generator: Callable[[random.Random], tuple[str, list[ToolCall]]] | None = None
    split_seeds: dict[str, int] = field(default_factory=dict)

    def tasks(self, split: str, count: int) -> list[Task]:
        """``count`` tasks of a split (deterministic; train and held-out splits never share a task)."""
        if self.generator is None:
            raise EnvError(f"task family '{self.name}' has no task generator; use self-questioning to make tasks")
        if split not in self.split_seeds:
            raise EnvError(f"task family '{self.name}' has no split '{split}'; known: {', '.join(self.split_seeds)}")
        others: set[str] = {d.request for d in self.demonstrations}
        for other, seed in self.split_seeds.items():
            if other != split:
                others.update(q for q, _ in self._draw(seed, count))
        out = []
        for i, (query, calls) in enumerate(self._draw(self.split_seeds[split], count, exclude=others)):
            out.append(Task(task_id=f"{self.name}-{split}-{i:04d}", env_name="bfcl", query=query,
                            reference_solution=[calls], source=TaskSource.REAL,
                            metadata={"category": "family", "bfcl_id": f"{self.name}-{split}-{i:04d}",
                                      "involved_classes": list(self.classes), "family": self.name,
                                      "allowed_tools": list(self.tools)}))
        return out

    def _draw(self, seed: int, count: int, exclude: set[str] | None = None) -> list[tuple[str, list[ToolCall]]]:
        rng = random.Random(seed)
        seen, out = set(exclude or ()), []
        for _ in range(count * 50):
            if len(out) == count:
                break
            query, calls = self.generator(rng)
            if query not in seen:
                seen.add(query)
                out.append((query, calls))
        return out


_ARITH_PHRASES = {
    "add": ["What is {a} plus {b}?", "Add {a} and {b}.", "Compute the sum of {a} and {b}."],
    "subtract": ["What is {a} minus {b}?", "Subtract {b} from {a}.", "Compute {a} take away {b}."],
    "multiply": ["What is {a} times {b}?", "Multiply {a} by {b}.", "Compute the product of {a} and {b}."],
    "divide": ["What is {a} divided by {b}?", "Divide {a} by {b}.", "Compute {a} over {b}."],
}


def _arith(rng: random.Random) -> tuple[str, list[ToolCall]]:
    op = rng.choice(sorted(_ARITH_PHRASES))
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    query = rng.choice(_ARITH_PHRASES[op]).format(a=a, b=b)
    return query, [ToolCall(name=op, arguments={"a": a, "b": b})]


def _arith_wide(rng: random.Random) -> tuple[str, list[ToolCall]]:
    """The wider curriculum step: the four arithmetic tools plus power, absolute value and max (new arguments)."""
    kind = rng.randrange(7)
    if kind < 4:
        return _arith(rng)
    if kind == 4:
        base, exp = rng.randint(2, 12), rng.randint(2, 4)
        q = rng.choice(["What is {a} to the power of {b}?", "Raise {a} to the power {b}."]).format(a=base, b=exp)
        return q, [ToolCall(name="power", arguments={"base": base, "exponent": exp})]
    if kind == 5:
        n = -rng.randint(2, 999)
        return rng.choice(["What is the absolute value of {n}?", "Give the magnitude of {n}."]).format(n=n), \
            [ToolCall(name="absolute_value", arguments={"number": n})]
    nums = [rng.randint(1, 99) for _ in range(rng.randint(3, 5))]
    listing = ", ".join(map(str, nums))
    return rng.choice(["Which is the largest of {x}?", "Find the maximum of {x}."]).format(x=listing), \
        [ToolCall(name="max_value", arguments={"numbers": nums})]


_ARITH_DEMOS = (
    Demonstration("What is 12 plus 30?", ToolCall(name="add", arguments={"a": 12, "b": 30}),
                  '{"result": 42}', "12 plus 30 is 42."),
    Demonstration("Multiply 6 by 7.", ToolCall(name="multiply", arguments={"a": 6, "b": 7}),
                  '{"result": 42}', "6 times 7 is 42."),
    Demonstration("What is 50 minus 8?", ToolCall(name="subtract", arguments={"a": 50, "b": 8}),
                  '{"result": 42}', "50 minus 8 is 42."),
)

FAMILIES: dict[str, TaskFamily] = {
    "arith": TaskFamily(
        name="arith", classes=("MathAPI",), tools=("add", "subtract", "multiply", "divide"),
        description="MathAPI restricted to add/subtract/multiply/divide (shared arguments a, b); one call per task",
        demonstrations=_ARITH_DEMOS, generator=_arith, split_seeds={"train": 1, "dev": 2, "test": 3}),
    # the next curriculum step after `arith`: three more MathAPI tools with arguments of their own
    "arith_wide": TaskFamily(
        name="arith_wide", classes=("MathAPI",),
        tools=("add", "subtract", "multiply", "divide", "power", "absolute_value", "max_value"),
        description="arith plus power(base, exponent), absolute_value(number), max_value(numbers); one call per task",
        demonstrations=_ARITH_DEMOS + (
            Demonstration("What is 3 to the power of 4?", ToolCall(name="power", arguments={"base": 3, "exponent": 4}),
                          '{"result": 81.0}', "3 to the power of 4 is 81."),),
        generator=_arith_wide, split_seeds={"train": 11, "dev": 12, "test": 13}),
}


def get_family(name: str) -> TaskFamily:
    if name not in FAMILIES:
        raise EnvError(f"unknown task family '{name}'; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]
