"""Writes configs/panels/arith_panel2_v1.jsonl: the second held-out panel of the `arith` family (issue 76).

48 tasks, 12 per operation (add, subtract, multiply, divide), one MathAPI call each, in 24 phrasings written for
this panel alone: none is a phrasing of the family's generator (env/bfcl/families.py: `_ARITH_PHRASES`), of its
worked examples, or of any prompt of the project (checked below, numbers masked). Each phrasing is used twice, with
operands drawn once from a seed of the panel's own (2-99, like the family's). Fixed and versioned: v1 is committed
before any run that reports on it; a change is a new version with a new file name, never an edit of this one.

    .venv/bin/python benchmarks/evidence/make_arith_panel2.py          # rewrites the file; `git diff` must show nothing
"""

from __future__ import annotations

import random
from pathlib import Path

from evolvekit.env.bfcl.families import _ARITH_DEMOS, _ARITH_PHRASES
from evolvekit.questioning.pipeline import wording
from evolvekit.types import Task, TaskSource, ToolCall

VERSION = "v1"
OUT = Path(__file__).resolve().parents[2] / "configs" / "panels" / f"arith_panel2_{VERSION}.jsonl"

# {a} is the tool's first argument, {b} its second (subtract: a - b; divide: a / b)
PHRASINGS = {
    "add": [
        "Find {a} + {b}.",
        "Calculate the total of {a} and {b}.",
        "I have {a} marbles and get {b} more. How many marbles do I have now?",
        "Please sum {a} with {b}.",
        "Increase {a} by {b}.",
        "How much do {a} and {b} come to together?",
    ],
    "subtract": [
        "Find {a} - {b}.",
        "Take {b} away from {a}.",
        "A jar holds {a} coins and {b} are removed. How many coins are left?",
        "Calculate the difference when {b} is subtracted from {a}.",
        "Decrease {a} by {b}.",
        "How far is {a} above {b}?",
    ],
    "multiply": [
        "Find {a} * {b}.",
        "Calculate {a} multiplied by {b}.",
        "There are {a} boxes with {b} pens in each. How many pens are there in all?",
        "Scale {a} up by a factor of {b}.",
        "Work out {a} × {b}.",
        "How much is {a} lots of {b}?",
    ],
    "divide": [
        "Find {a} / {b}.",
        "Calculate the quotient of {a} and {b}.",
        "Share {a} dollars equally among {b} people. How much does each person get?",
        "How many times does {b} go into {a}?",
        "Work out {a} ÷ {b}.",
        "Split {a} into {b} equal parts; how big is each part?",
    ],
}


def tasks() -> list[Task]:
    rng = random.Random(f"arith_panel2_{VERSION}")
    out = []
    for op in sorted(PHRASINGS):
        for phrasing in PHRASINGS[op]:
            for _ in range(2):
                a, b = rng.randint(2, 99), rng.randint(2, 99)
                i = len(out)
                out.append(
                    Task(
                        task_id=f"arith-panel2-{VERSION}-{i:04d}",
                        env_name="bfcl",
                        query=phrasing.format(a=a, b=b),
                        reference_solution=[[ToolCall(name=op, arguments={"a": a, "b": b})]],
                        source=TaskSource.REAL,
                        metadata={
                            "category": "family",
                            "bfcl_id": f"arith-panel2-{VERSION}-{i:04d}",
                            "involved_classes": ["MathAPI"],
                            "family": "arith",
                            "allowed_tools": ["add", "subtract", "multiply", "divide"],
                            "panel": f"arith_panel2_{VERSION}",
                        },
                    )
                )
    return out


def main() -> None:
    made = tasks()
    generator = {wording(p.format(a=1, b=2)) for ps in _ARITH_PHRASES.values() for p in ps}
    examples = {wording(d.request) for d in _ARITH_DEMOS}
    shared = {wording(t.query) for t in made} & (generator | examples)
    assert not shared, f"the panel shares wordings with the generator or the worked examples: {shared}"
    assert len(made) == 48 and len({t.query for t in made}) == 48
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(t.model_dump_json() + "\n" for t in made), encoding="utf-8")
    print(f"{OUT}: {len(made)} tasks")


if __name__ == "__main__":
    main()
