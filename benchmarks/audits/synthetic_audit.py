"""Audit of the synthesized tasks an evidence run trained on: does each request ask for what its reference does?

    .venv/bin/python benchmarks/audits/synthetic_audit.py runs/evidence_arith_turns [more roots] --out FILE.md

Reads every ``<root>/<row>/seed<k>/run.sqlite`` (the stores the evidence runs leave) and checks each kept synthetic
task of a MathAPI family (arith, arith_turns, arith_chain) with the curation checks evolvekit ships
(``questioning/curate.py``: the grounding share of ``questioning.grounding_threshold``, exact numbers of
``questioning.grounding_exact``, tool agreement of ``questioning.tool_agreement`` with the embedded MiniLM) and with
an audit-only reading of MathAPI requests that no run uses:

- *well posed*: the request states exactly the reference's numbers (each as often as the calls use it, no other)
  and names each reference call's operation ("add/sum/plus", "subtract/minus/difference", "multipl/product/times",
  "divid/quotient/division");
- *follow-up wording*: the request refers to an earlier result ("that", "the result", "the number") although a
  synthesized task has a single turn, so there is none.

A multi-turn synthesized task (``questioning.difficulty.turns``) is read turn by turn: each turn names its own
call's operation, only its first turn counts for follow-up wording (a later turn is meant to refer to the earlier
result), and a later subtract or divide must take the earlier result as its first operand ("Divide that by 4." is
divide(result, 4); a chain whose explored call divided *by* the result reads the other way round).

Needs nothing but the stores and the embedded embedding model; takes seconds.
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path

from evolvekit.config import load_config
from evolvekit.env.registry import make_env
from evolvekit.llm.factory import build_embedder
from evolvekit.questioning.curate import ToolAgreement, grounding, numbers_exact
from evolvekit.types import Task

OPERATION_WORDS = {
    "add": ("add", "sum", "plus"),
    "subtract": ("subtract", "minus", "difference"),
    "multiply": ("multipl", "product", "times"),
    "divide": ("divid", "quotient", "division"),
}
FOLLOW_UP = re.compile(r"\b(that|the result|the number|this)\b", re.IGNORECASE)
MATH_SANDBOX = {"classes": ["MathAPI"], "tools": list(OPERATION_WORDS)}


def _turn_pairs(task: Task) -> list[tuple[str, list]]:
    refs = task.reference_solution or []
    if len(task.turns) == len(refs) > 1:
        return [(text.lower(), list(calls)) for text, calls in zip(task.turns, refs)]
    return [(" ".join(task.turns).lower(), [c for turn in refs for c in turn])]


def names_operations(task: Task) -> bool:
    return all(
        any(w in text for w in OPERATION_WORDS.get(c.name, ())) for text, calls in _turn_pairs(task) for c in calls
    )


def result_first(task: Task) -> bool:
    """Every later turn's subtract or divide takes the value carried from the earlier result as its first operand."""
    carried = task.metadata.get("carried_values") or []
    for k, turn in enumerate(task.reference_solution or []):
        taken = carried[k] if k < len(carried) else []
        for c in turn:
            if k > 0 and c.name in ("subtract", "divide") and taken and c.arguments.get("a") not in taken:
                return False
    return True


def first_turn_refers(task: Task) -> bool:
    return bool(FOLLOW_UP.search(task.turns[0] if len(task.turns) > 1 else " ".join(task.turns)))


def synthetic_tasks(store: Path) -> list[Task]:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as con:
        rows = con.execute("SELECT json FROM tasks WHERE source = 'synthetic'").fetchall()
    return [Task.model_validate_json(js) for (js,) in rows]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", nargs="+", type=Path, help="evidence run roots (<root>/<row>/seed<k>/run.sqlite)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/synthetic_task_audit.md"))
    ap.add_argument("--examples", type=int, default=12)
    ap.add_argument("--rows", nargs="*", default=None, help="only these rows")
    args = ap.parse_args(argv)

    cfg = load_config(None, ["env.family=arith_turns"])
    env = make_env(cfg.env)
    try:
        tools = env.reset(None, MATH_SANDBOX).tools
    finally:
        env.close()
    agreement = ToolAgreement(build_embedder(cfg.embedding).embed, tools)

    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    examples: list[str] = []
    for root in args.roots:
        for store in sorted(root.glob("*/seed*/run.sqlite")):
            if store.parent.parent.is_symlink():  # a row linked from another root is counted there
                continue
            if args.rows and store.parent.parent.name not in args.rows:
                continue
            row = f"{root.name}/{store.parent.parent.name}"
            for t in synthetic_tasks(store):
                well = numbers_exact(t) and names_operations(t) and result_first(t)
                checks = {
                    "tasks": True,
                    "grounding 1.0": grounding(t) >= 1.0,
                    "exact numbers": numbers_exact(t),
                    "tool agreement": agreement.agrees(t),
                    "exact + agreement": numbers_exact(t) and agreement.agrees(t),
                    "well posed": well,
                    "exact + agreement, well posed": numbers_exact(t) and agreement.agrees(t) and well,
                    "follow-up wording": first_turn_refers(t),
                    "two turns": len(t.turns) > 1,
                }
                for k, v in checks.items():
                    counts[row][k] += int(v)
                if len(examples) < args.examples and not well:
                    ref = " / ".join(
                        "; ".join(f"{c.name}({', '.join(map(str, c.arguments.values()))})" for c in turn)
                        for turn in t.reference_solution or []
                    )
                    examples.append(f"| {row} | {' / '.join(t.turns)} | {ref} |")
    if not counts:
        print("no run stores with synthetic tasks under " + ", ".join(map(str, args.roots)), file=sys.stderr)
        return 2
    keys = list(next(iter(counts.values())))
    total = {k: sum(c[k] for c in counts.values()) for k in keys}
    lines = [
        "$ .venv/bin/python benchmarks/audits/synthetic_audit.py "
        + " ".join(map(str, args.roots))
        + (" --rows " + " ".join(args.rows) if args.rows else "")
        + f" --out {args.out}",
        "",
        "# Synthesized tasks the evidence runs trained on: do the requests ask for what their references do?",
        "",
        "Kept synthetic tasks of every run (after the runs' own curation: dedup, feasibility replay, grounding share "
        "1.0). Columns: the curation checks evolvekit ships (grounding share 1.0; exact numbers; tool agreement with "
        "the embedded MiniLM; both) and the audit-only reading (well posed: exact numbers, the operation named in its "
        "turn and, in a later turn, the earlier result as the first operand of subtract/divide; follow-up wording: the "
        "first (or only) turn refers to an earlier result it does not have).",
        "",
        "| runs | " + " | ".join(keys) + " |",
        "|---|" + "---|" * len(keys),
    ]
    lines += [f"| {row} | " + " | ".join(str(c[k]) for k in keys) + " |" for row, c in counts.items()]
    lines += ["| **all** | " + " | ".join(f"**{total[k]}**" for k in keys) + " |", ""]
    lines += ["Requests that are not well posed (first of them):", "", "| run | request | reference |", "|---|---|---|"]
    lines += examples
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
