"""What the policy does on the held-out tasks before and after training: the share of samples that made at least
two tool calls that executed without an error, the share that passed the environment's check, and the tools
called most. For a two-call family this tells "learned to make the second call" from "learned to stop early".

    .venv/bin/python benchmarks/evidence/heldout_calls.py runs/evidence_fs_chain [more roots] [--rows a b]

Reads every ``<root>/<row>/seed<k>/run.sqlite`` (the stores evidence runs leave): the trajectories of the phases
``eval_before`` and ``eval_after`` and each step's executed calls (``calls[].ok``). Prints a markdown table; takes
seconds.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections import Counter
from pathlib import Path

from training_groups import print_table, run_stores, store_arguments  # benchmarks/, the script's own folder


def phase_figures(store: Path, phase: str) -> tuple[int, float, float, list[tuple[str, int]]]:
    """(samples, share with ≥ 2 calls that executed, share passed, the three tools called most)."""
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as con:
        rows = con.execute("SELECT json FROM trajectories WHERE phase = ?", (phase,)).fetchall()
    two = passed = 0
    tools: Counter[str] = Counter()
    for (js,) in rows:
        traj = json.loads(js)
        calls = [c for step in traj.get("steps", []) for c in step.get("calls") or []]
        two += sum(1 for c in calls if c.get("ok")) >= 2
        passed += float(traj.get("outcome_reward") or 0.0) >= 1.0
        tools.update(str(c.get("name")) for c in calls)
    n = len(rows)
    return n, two / n if n else 0.0, passed / n if n else 0.0, tools.most_common(3)


def main(argv: list[str] | None = None) -> int:
    args = store_arguments(__doc__ or "", argv)
    lines = [
        "| row | seed | 2+ calls executed, before → after | passed, before → after | tools called most after |",
        "|---|---|---|---|---|",
    ]
    for row, seed, store in run_stores(args.roots, args.rows):
        n0, two0, pass0, _ = phase_figures(store, "eval_before")
        n1, two1, pass1, tools = phase_figures(store, "eval_after")
        if not n0 or not n1:
            continue  # an unfinished run
        most = ", ".join(f"{name} {count}" for name, count in tools)
        lines.append(f"| {row} | {seed} | {two0:.2f} → {two1:.2f} | {pass0:.3f} → {pass1:.3f} | {most} |")
    return print_table(lines, args.roots)


if __name__ == "__main__":
    sys.exit(main())
