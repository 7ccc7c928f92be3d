"""Training groups by task source: how many GRPO groups of each run trained on real and on synthesized tasks, how
many of them had mixed outcomes (the groups with a gradient under GRPO), and how often each source's rollouts
passed the environment's check.

    .venv/bin/python benchmarks/evidence/training_groups.py runs/evidence_arith_turns_k8 [more roots] [--rows a b]

Reads every ``<root>/<row>/seed<k>/run.sqlite`` (the stores evidence runs leave): the ``train`` trajectories, their
group, their task's source and the environment's check (``rewards.state_score``, else the outcome reward). Prints a
markdown table; takes seconds.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path


def groups(store: Path) -> dict[str, tuple[str, list[float]]]:
    """group id -> (task source, checked outcome of each rollout)."""
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as con:
        rows = con.execute(
            "SELECT t.group_id, k.source, t.json FROM trajectories t JOIN tasks k ON k.task_id = t.task_id "
            "WHERE t.phase = 'train'"
        ).fetchall()
    out: dict[str, tuple[str, list[float]]] = {}
    for gid, source, js in rows:
        traj = json.loads(js)
        state = (traj.get("rewards") or {}).get("state_score")
        score = float(state if state is not None else traj.get("outcome_reward") or 0.0)
        out.setdefault(gid, (source, []))[1].append(score)
    return out


def summary(store: Path) -> dict[str, tuple[int, int, float]]:
    """source -> (groups, mixed groups, share of rollouts that passed)."""
    per: dict[str, list[list[float]]] = defaultdict(list)
    for source, scores in groups(store).values():
        per[source].append(scores)
    out = {}
    for source, gs in per.items():
        mixed = sum(1 for s in gs if 0 < sum(x >= 1.0 for x in s) < len(s))
        flat = [x for s in gs for x in s]
        out[source] = (len(gs), mixed, sum(x >= 1.0 for x in flat) / len(flat) if flat else 0.0)
    return out


def main(argv: list[str] | None = None) -> int:
    args = store_arguments(__doc__ or "", argv)
    lines = [
        "| row | seed | real groups (mixed) | real rollouts passed | synthetic groups (mixed) "
        "| synthetic rollouts passed |",
        "|---|---|---|---|---|---|",
    ]
    for row, seed, store in run_stores(args.roots, args.rows):
        s = summary(store)
        cells = []
        for source in ("real", "synthetic"):
            n, mixed, passed = s.get(source, (0, 0, 0.0))
            cells += [f"{n} ({mixed})", f"{passed:.2f}" if n else "—"]
        lines.append(f"| {row} | {seed} | " + " | ".join(cells) + " |")
    return print_table(lines, args.roots)


def store_arguments(doc: str, argv: list[str] | None) -> argparse.Namespace:
    """The command line of a run-store reader: evidence roots, optionally only some rows."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("roots", nargs="+", type=Path)
    ap.add_argument("--rows", nargs="*", default=None, help="only these rows")
    return ap.parse_args(argv)


def run_stores(roots: list[Path], rows: list[str] | None) -> list[tuple[str, str, Path]]:
    """(row, seed number, store) of every ``<root>/<row>/seed<k>/run.sqlite``, only ``rows`` when given."""
    out = []
    for root in roots:
        for store in sorted(root.glob("*/seed*/run.sqlite")):
            row, seed = store.parent.parent.name, store.parent.name[4:]
            if not rows or row in rows:
                out.append((row, seed, store))
    return out


def print_table(lines: list[str], roots: list[Path]) -> int:
    """Print a markdown table (header and separator first); exit status 2 when it has no row."""
    if len(lines) == 2:
        print("no finished run stores under " + ", ".join(map(str, roots)), file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
