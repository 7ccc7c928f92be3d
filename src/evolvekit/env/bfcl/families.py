"""Task families: a BFCL backend restricted to a few tools, with worked examples shown as real chat turns.

A family is what makes learning visible for a small policy (FACTS.md, "What SmolLM2-135M can do"): on all 17
MathAPI tools SmolLM2-135M is correct in ~0-1% of samples, on the four arithmetic tools with three chat-turn
examples in ~30% — the band where GRPO learns. Tasks of a family run on the real BFCL backend and are scored
by the official multi-turn checker, exactly like the benchmark's own tasks.

The ``arith`` family's training and held-out tasks are generated procedurally from disjoint seeds: they are a
fixed, documented *benchmark* for the CPU baseline (benchmarks/evidence/learning_grpo.py), not the product's task source
— self-questioning synthesises tasks for any family from exploration of its sandbox.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

from evolvekit.errors import EnvError
from evolvekit.types import ChatMessage, Task, TaskSource, ToolCall


@dataclass(frozen=True)
class Demonstration:
    """One worked episode: the request, the call, the tool's answer, any further (call, answer) pairs of a
    multi-step task (``then``), and the closing message; a multi-turn example continues with the user's next
    turns (``next_turns``, each a demonstration of its own)."""

    request: str
    call: ToolCall
    result: str
    final: str
    then: tuple[tuple[ToolCall, str], ...] = ()
    next_turns: tuple[Demonstration, ...] = ()

    @property
    def steps(self) -> list[tuple[ToolCall, str]]:
        return [(self.call, self.result), *self.then]

    def messages(self, call_format: Callable[[ToolCall], str]) -> list[ChatMessage]:
        out = [ChatMessage(role="user", content=self.request)]
        for call, result in self.steps:
            out += [
                ChatMessage(role="assistant", content=call_format(call)),
                ChatMessage(role="user", content=f"Tool results:\n[{call.name}] {result}"),
            ]
        out.append(ChatMessage(role="assistant", content=self.final))
        for turn in self.next_turns:
            out += turn.messages(call_format)
        return out


# A generator draws one task: (request, reference calls) or (request, reference calls, initial_config); a
# multi-turn task's request is a list of turns and its reference a list of calls per turn
Draw = tuple[str, list[ToolCall]] | tuple[str, list[ToolCall], dict] | tuple[list[str], list[list[ToolCall]], dict]


@dataclass(frozen=True)
class TaskFamily:
    name: str
    classes: tuple[str, ...]
    tools: tuple[str, ...]
    description: str
    demonstrations: tuple[Demonstration, ...] = ()
    generator: Callable[[random.Random], Draw] | None = None
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
                others.update(_key(q) for q, _, _ in self._draw(seed, count))
        out = []
        for i, (query, calls, config) in enumerate(self._draw(self.split_seeds[split], count, exclude=others)):
            out.append(
                Task(
                    task_id=f"{self.name}-{split}-{i:04d}",
                    env_name="bfcl",
                    query=query,
                    initial_config=config,
                    reference_solution=calls if isinstance(query, list) else [calls],
                    source=TaskSource.REAL,
                    metadata={
                        "category": "family",
                        "bfcl_id": f"{self.name}-{split}-{i:04d}",
                        "involved_classes": list(self.classes),
                        "family": self.name,
                        "allowed_tools": list(self.tools),
                    },
                )
            )
        return out

    def sandbox_state(self) -> dict:
        """An initial state for exploration drawn from the family's own generator at a seed of its own (not a
        split's), so self-questioning starts in a state the environment makes, never one read off a person-written
        task (the information boundary, boundary.py); ``{}`` for a family without state or without a generator."""
        if self.generator is None:
            return {}
        drawn = self.generator(random.Random(f"sandbox:{self.name}"))
        return dict(drawn[2]) if len(drawn) == 3 else {}

    def _draw(self, seed: int, count: int, exclude: set[str] | None = None) -> list[tuple[Any, list, dict]]:
        assert self.generator is not None
        rng = random.Random(seed)
        seen: set[str] = set(exclude or ())
        out: list[tuple[Any, list, dict]] = []
        for _ in range(count * 50):
            if len(out) == count:
                break
            drawn = self.generator(rng)
            query, calls, config = drawn if len(drawn) == 3 else (*drawn, {})
            if _key(query) not in seen:
                seen.add(_key(query))
                out.append((query, calls, config))
        return out


def _key(query: str | list[str]) -> str:
    """A task's request as one string (turns joined), for keeping splits disjoint."""
    return query if isinstance(query, str) else "\n".join(query)


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
        return rng.choice(["What is the absolute value of {n}?", "Give the magnitude of {n}."]).format(n=n), [
            ToolCall(name="absolute_value", arguments={"number": n})
        ]
    nums = [rng.randint(1, 99) for _ in range(rng.randint(3, 5))]
    listing = ", ".join(map(str, nums))
    return rng.choice(["Which is the largest of {x}?", "Find the maximum of {x}."]).format(x=listing), [
        ToolCall(name="max_value", arguments={"numbers": nums})
    ]


_ARITH_DEMOS = (
    Demonstration(
        "What is 12 plus 30?", ToolCall(name="add", arguments={"a": 12, "b": 30}), '{"result": 42}', "12 plus 30 is 42."
    ),
    Demonstration(
        "Multiply 6 by 7.", ToolCall(name="multiply", arguments={"a": 6, "b": 7}), '{"result": 42}', "6 times 7 is 42."
    ),
    Demonstration(
        "What is 50 minus 8?",
        ToolCall(name="subtract", arguments={"a": 50, "b": 8}),
        '{"result": 42}',
        "50 minus 8 is 42.",
    ),
)


def _call(name: str, **arguments) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


_CHAIN_PHRASES = (
    "Add {a} and {b}, then multiply the sum by {c}.",
    "What is ({a} plus {b}) times {c}?",
    "Compute the sum of {a} and {b}, and multiply it by {c}.",
)


def _arith_chain(rng: random.Random) -> Draw:
    """Two dependent calls: add two numbers, then multiply the sum (the second call needs the first's result)."""
    a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(2, 9)
    query = rng.choice(_CHAIN_PHRASES).format(a=a, b=b, c=c)
    return query, [_call("add", a=a, b=b), _call("multiply", a=a + b, b=c)]


_ARITH_CHAIN_DEMOS = (
    Demonstration(
        "Add 5 and 7, then multiply the sum by 3.",
        _call("add", a=5, b=7),
        '{"result": 12}',
        "The sum is 12, and 12 times 3 is 36.",
        then=((_call("multiply", a=12, b=3), '{"result": 36}'),),
    ),
    Demonstration(
        "What is (20 plus 4) times 2?",
        _call("add", a=20, b=4),
        '{"result": 24}',
        "20 plus 4 is 24, and 24 times 2 is 48.",
        then=((_call("multiply", a=24, b=2), '{"result": 48}'),),
    ),
    Demonstration(
        "Compute the sum of 9 and 6, and multiply it by 5.",
        _call("add", a=9, b=6),
        '{"result": 15}',
        "The sum is 15; times 5 that is 75.",
        then=((_call("multiply", a=15, b=5), '{"result": 75}'),),
    ),
)

_TURN_PHRASES = (
    ("Add {a} and {b}.", "Now multiply the result by {c}."),
    ("What is {a} plus {b}?", "Multiply that by {c}."),
    ("Compute the sum of {a} and {b}.", "Now take that sum times {c}."),
)


# the second turn's operation on the first turn's sum: (its result, its word in a closing message)
_SECOND_OPS = {"multiply": (lambda s, c: s * c, "times"), "add": (lambda s, c: s + c, "plus")}


def _sum_then(rng: random.Random, second: str, phrases: tuple[tuple[str, str], ...], c_max: int) -> Draw:
    """Two user turns, one call each, the second on the first's result: add two numbers; then (next turn) apply
    ``second`` to the sum and a third number, with the sum appearing only in the first call's result."""
    a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(2, c_max)
    first, then = rng.choice(phrases)
    return (
        [first.format(a=a, b=b), then.format(c=c)],
        [[_call("add", a=a, b=b)], [_call(second, a=a + b, b=c)]],
        {},
    )


def _arith_turns(rng: random.Random) -> Draw:
    """add two numbers; then (next turn) multiply the sum (``_sum_then``)."""
    return _sum_then(rng, "multiply", _TURN_PHRASES, 9)


def _turns_demo(a: int, b: int, c: int, phrases: tuple[str, str], second: str = "multiply") -> Demonstration:
    s = a + b
    op, word = _SECOND_OPS[second]
    return Demonstration(
        phrases[0].format(a=a, b=b),
        _call("add", a=a, b=b),
        f'{{"result": {s}}}',
        f"{a} plus {b} is {s}.",
        next_turns=(
            Demonstration(
                phrases[1].format(c=c),
                _call(second, a=s, b=c),
                f'{{"result": {op(s, c)}}}',
                f"{s} {word} {c} is {op(s, c)}.",
            ),
        ),
    )


_ARITH_TURNS_DEMOS = (
    _turns_demo(5, 7, 3, ("Add {a} and {b}.", "Now multiply the result by {c}.")),
    _turns_demo(20, 4, 2, ("What is {a} plus {b}?", "Multiply that by {c}.")),
    _turns_demo(9, 6, 5, ("Compute the sum of {a} and {b}.", "Now take that sum times {c}.")),
)

# arith_turns with each turn naming its tool: at 135M the second turn of arith_turns is mostly answered in text
_NAMED_TURN_PHRASES = (
    ("Use add to add {a} and {b}.", "Now use multiply to multiply the result by {c}."),
    ("Call add on {a} and {b}.", "Call multiply on that result and {c}."),
    ("With the add tool, compute {a} plus {b}.", "Now with the multiply tool, take that sum times {c}."),
)


def _arith_turns_named(rng: random.Random) -> Draw:
    """arith_turns (``_sum_then`` with multiply) whose turns name the tool they need."""
    return _sum_then(rng, "multiply", _NAMED_TURN_PHRASES, 9)


_NAMED_TURNS_DEMOS = tuple(
    _turns_demo(a, b, c, phrases) for (a, b, c), phrases in zip(((5, 7, 3), (20, 4, 2), (9, 6, 5)), _NAMED_TURN_PHRASES)
)

_ADD_TURN_PHRASES = (
    ("Add {a} and {b}.", "Now add {c} to the result."),
    ("What is {a} plus {b}?", "Add {c} to that."),
    ("Compute the sum of {a} and {b}.", "Now take that sum plus {c}."),
)


def _add_turns(rng: random.Random) -> Draw:
    """add two numbers; then (next turn) add a third to the sum (``_sum_then``): the same tool in both turns, the
    easier sibling of arith_turns, whose second turn needs another tool."""
    return _sum_then(rng, "add", _ADD_TURN_PHRASES, 40)


_ADD_TURNS_DEMOS = tuple(
    _turns_demo(a, b, c, phrases, "add")
    for (a, b, c), phrases in zip(((5, 7, 3), (20, 4, 12), (9, 6, 25)), _ADD_TURN_PHRASES)
)

_FILES = (
    "notes",
    "budget",
    "draft",
    "summary",
    "todo",
    "letter",
    "report",
    "ideas",
    "minutes",
    "recipe",
    "poem",
    "invoice",
    "agenda",
    "journal",
    "contacts",
    "plan",
)
_FOLDERS = (
    "archive",
    "docs",
    "backup",
    "projects",
    "photos",
    "music",
    "old",
    "shared",
    "inbox",
    "work",
    "personal",
    "temp",
    "misc",
    "reports",
    "drafts",
    "travel",
)


def _workspace(rng: random.Random) -> tuple[list[str], str, str, str, dict]:
    """A file-system task's draw: three files and an empty folder ``sub`` in the workspace, a folder name ``new``
    and a file name ``name`` that do not exist yet, and the initial_config holding them."""
    files = [f"{n}.txt" for n in rng.sample(_FILES, 3)]
    sub, new = rng.sample(_FOLDERS, 2)
    name = f"{rng.choice(_FILES)}_{rng.randint(1, 99)}.txt"
    contents = {f: {"type": "file", "content": f"{f.split('.')[0]} {rng.randint(1, 999)}"} for f in files}
    config = {
        "GorillaFileSystem": {
            "root": {
                "workspace": {"type": "directory", "contents": {**contents, sub: {"type": "directory", "contents": {}}}}
            }
        }
    }
    return files, sub, new, name, config


def _fs_chain(rng: random.Random) -> Draw:
    """Two dependent calls on GorillaFileSystem whose end state is checked: the second call acts on what the first
    made or where the first moved (a new folder, then a move into it; a cd, then a new file or folder there)."""
    files, sub, new, name, config = _workspace(rng)
    kind = rng.randrange(3)
    if kind == 0:
        f = rng.choice(files)
        query = rng.choice(
            [
                "Make a new folder called {d} and move {f} into it.",
                "Create a folder named {d}, then move the file {f} into {d}.",
            ]
        ).format(d=new, f=f)
        calls = [_call("mkdir", dir_name=new), _call("mv", source=f, destination=new)]
    elif kind == 1:
        query = rng.choice(
            [
                "Go into the {s} folder and create a file named {n} there.",
                "In the {s} folder, make an empty file called {n}.",
            ]
        ).format(s=sub, n=name)
        calls = [_call("cd", folder=sub), _call("touch", file_name=name)]
    else:
        query = rng.choice(
            [
                "Go into the {s} folder and make a folder called {d} inside it.",
                "Inside the {s} folder, create a new folder named {d}.",
            ]
        ).format(s=sub, d=new)
        calls = [_call("cd", folder=sub), _call("mkdir", dir_name=new)]
    return query, calls, config


_FS_ONE_PHRASES = (
    ("touch", ("Create an empty file named {n}.", "Make a new file called {n} in this folder.")),
    ("mkdir", ("Create a folder named {d}.", "Make a new directory called {d} here.")),
    ("move", ("Move {f} into the {s} folder.", "Put the file {f} inside {s}.")),
    ("rename", ("Rename {f} to {n}.", "Change the name of the file {f} to {n}.")),
)


def _fs_one(rng: random.Random) -> Draw:
    """One GorillaFileSystem call whose end state is checked, in a workspace of three files and an empty folder: a
    new file, a new folder, a file moved into the folder, or a file renamed (the second environment of issue 76.5;
    its requests are written for its held-out split alone: no prompt shows them)."""
    files, sub, new, name, config = _workspace(rng)
    kind, phrases = rng.choice(_FS_ONE_PHRASES)
    f = rng.choice(files)
    query = rng.choice(phrases).format(n=name, d=new, f=f, s=sub)
    calls = {
        "touch": [_call("touch", file_name=name)],
        "mkdir": [_call("mkdir", dir_name=new)],
        "move": [_call("mv", source=f, destination=sub)],
        "rename": [_call("mv", source=f, destination=name)],
    }[kind]
    return query, calls, config


# person-written worked examples of fs_one, shown only behind env.worked_examples: person (names no split draws)
_FS_ONE_DEMOS = (
    Demonstration(
        "Please add a blank file called scores.txt.",
        _call("touch", file_name="scores.txt"),
        "None",
        "Created scores.txt.",
    ),
    Demonstration(
        "I need a directory named fiction.", _call("mkdir", dir_name="fiction"), "None", "Created the folder fiction."
    ),
    Demonstration(
        "essay.txt belongs in papers; move it there.",
        _call("mv", source="essay.txt", destination="papers"),
        "{\"result\": \"'essay.txt' moved to 'papers/essay.txt'\"}",
        "Moved essay.txt into papers.",
    ),
)


_FS_TURN_PHRASES = (
    ("Go into the {s} folder.", "Now create a file named {n} there."),
    ("Change into the {s} directory.", "Make an empty file called {n} in it."),
    ("Open the {s} folder.", "Create a new folder named {d} inside it."),
    ("Move into the {s} folder.", "Now make a folder called {d} there."),
)


def _fs_turns(rng: random.Random) -> Draw:
    """Two user turns on GorillaFileSystem, one call each, end state checked: enter a folder; then (next turn)
    create a file or folder *there*, which lands in the right place only if the first turn's call was made."""
    _, sub, new, name, config = _workspace(rng)
    first, second = rng.choice(_FS_TURN_PHRASES)
    make = _call("touch", file_name=name) if "{n}" in second else _call("mkdir", dir_name=new)
    return [first.format(s=sub), second.format(n=name, d=new)], [[_call("cd", folder=sub)], [make]], config


def _fs_turns_demo(sub: str, made: ToolCall, phrases: tuple[str, str], final: str) -> Demonstration:
    return Demonstration(
        phrases[0].format(s=sub),
        _call("cd", folder=sub),
        f'{{"current_working_directory": "{sub}"}}',
        f"I am in {sub} now.",
        next_turns=(Demonstration(phrases[1].format(**made.arguments), made, "None", final),),
    )


_FS_TURNS_DEMOS = (
    _fs_turns_demo(
        "games",
        _call("touch", file_name="scores.txt"),
        ("Go into the {s} folder.", "Now create a file named {file_name} there."),
        "Created scores.txt in games.",
    ),
    _fs_turns_demo(
        "books",
        _call("mkdir", dir_name="fiction"),
        ("Open the {s} folder.", "Create a new folder named {dir_name} inside it."),
        "Created the folder fiction inside books.",
    ),
    _fs_turns_demo(
        "music",
        _call("touch", file_name="playlist.txt"),
        ("Change into the {s} directory.", "Make an empty file called {file_name} in it."),
        "Created playlist.txt in music.",
    ),
)

_FS_CHAIN_DEMOS = (
    Demonstration(
        "Make a new folder called papers and move essay.txt into it.",
        _call("mkdir", dir_name="papers"),
        "None",
        "Done: papers holds essay.txt.",
        then=(
            (
                _call("mv", source="essay.txt", destination="papers"),
                "{\"result\": \"'essay.txt' moved to 'papers/essay.txt'\"}",
            ),
        ),
    ),
    Demonstration(
        "Go into the games folder and create a file named scores.txt there.",
        _call("cd", folder="games"),
        '{"current_working_directory": "games"}',
        "Created scores.txt in games.",
        then=((_call("touch", file_name="scores.txt"), "None"),),
    ),
    Demonstration(
        "Inside the books folder, create a new folder named fiction.",
        _call("cd", folder="books"),
        '{"current_working_directory": "books"}',
        "Created the folder fiction inside books.",
        then=((_call("mkdir", dir_name="fiction"), "None"),),
    ),
)

# the tool subsets the families expose: MathAPI's four operations, GorillaFileSystem's navigation and creation calls
_MATH_TOOLS = ("add", "subtract", "multiply", "divide")
_FS_TOOLS = ("ls", "cd", "mkdir", "mv", "touch", "cat")

FAMILIES: dict[str, TaskFamily] = {
    "arith": TaskFamily(
        name="arith",
        classes=("MathAPI",),
        tools=_MATH_TOOLS,
        description="MathAPI restricted to add/subtract/multiply/divide (shared arguments a, b); one call per task",
        demonstrations=_ARITH_DEMOS,
        generator=_arith,
        split_seeds={"train": 1, "dev": 2, "test": 3},
    ),
    # the next curriculum step after `arith`: three more MathAPI tools with arguments of their own
    "arith_wide": TaskFamily(
        name="arith_wide",
        classes=("MathAPI",),
        tools=(*_MATH_TOOLS, "power", "absolute_value", "max_value"),
        description="arith plus power(base, exponent), absolute_value(number), max_value(numbers); one call per task",
        demonstrations=_ARITH_DEMOS
        + (
            Demonstration(
                "What is 3 to the power of 4?",
                ToolCall(name="power", arguments={"base": 3, "exponent": 4}),
                '{"result": 81.0}',
                "3 to the power of 4 is 81.",
            ),
        ),
        generator=_arith_wide,
        split_seeds={"train": 11, "dev": 12, "test": 13},
    ),
    # multi-step families (the evidence issue): each task needs two dependent calls
    "arith_chain": TaskFamily(
        name="arith_chain",
        classes=("MathAPI",),
        tools=_MATH_TOOLS,
        description="two dependent MathAPI calls: add two numbers, then multiply the sum (the result feeds the "
        "second call); three worked two-call examples",
        demonstrations=_ARITH_CHAIN_DEMOS,
        generator=_arith_chain,
        split_seeds={"train": 31, "dev": 32, "test": 33},
    ),
    "arith_turns": TaskFamily(
        name="arith_turns",
        classes=("MathAPI",),
        tools=_MATH_TOOLS,
        description="two user turns, one MathAPI call each, the second on the first's result (add; then multiply "
        "the sum, which only the first call's result shows); three worked two-turn examples",
        demonstrations=_ARITH_TURNS_DEMOS,
        generator=_arith_turns,
        split_seeds={"train": 41, "dev": 42, "test": 43},
    ),
    "arith_turns_named": TaskFamily(
        name="arith_turns_named",
        classes=("MathAPI",),
        tools=_MATH_TOOLS,
        description="arith_turns whose two user turns name the tool each needs (add; then multiply the sum, which "
        "only the first call's result shows); three worked two-turn examples",
        demonstrations=_NAMED_TURNS_DEMOS,
        generator=_arith_turns_named,
        split_seeds={"train": 71, "dev": 72, "test": 73},
    ),
    "add_turns": TaskFamily(
        name="add_turns",
        classes=("MathAPI",),
        tools=_MATH_TOOLS,
        description="two user turns, one add each, the second on the first's result (add; then add a third number "
        "to the sum, which only the first call's result shows); three worked two-turn examples",
        demonstrations=_ADD_TURNS_DEMOS,
        generator=_add_turns,
        split_seeds={"train": 61, "dev": 62, "test": 63},
    ),
    "fs_chain": TaskFamily(
        name="fs_chain",
        classes=("GorillaFileSystem",),
        tools=_FS_TOOLS,
        description="two dependent GorillaFileSystem calls whose end state is checked (mkdir then mv into it; cd "
        "then touch or mkdir there); three worked two-call examples",
        demonstrations=_FS_CHAIN_DEMOS,
        generator=_fs_chain,
        split_seeds={"train": 21, "dev": 22, "test": 23},
    ),
    # the second environment of issue 76.5: one GorillaFileSystem call, end state checked
    "fs_one": TaskFamily(
        name="fs_one",
        classes=("GorillaFileSystem",),
        tools=_FS_TOOLS,
        description="one GorillaFileSystem call whose end state is checked (touch a new file, mkdir a new folder, mv "
        "a file into a folder, or mv to rename it); three worked examples behind env.worked_examples: person",
        demonstrations=_FS_ONE_DEMOS,
        generator=_fs_one,
        split_seeds={"train": 81, "dev": 82, "test": 83},
    ),
    "fs_turns": TaskFamily(
        name="fs_turns",
        classes=("GorillaFileSystem",),
        tools=_FS_TOOLS,
        description="two user turns on GorillaFileSystem, one call each, end state checked: cd into a folder; then "
        "touch or mkdir there (it lands in the right folder only after the first turn's cd); three worked two-turn "
        "examples",
        demonstrations=_FS_TURNS_DEMOS,
        generator=_fs_turns,
        split_seeds={"train": 51, "dev": 52, "test": 53},
    ),
}


def get_family(name: str) -> TaskFamily:
    if name not in FAMILIES:
        raise EnvError(f"unknown task family '{name}'; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]
