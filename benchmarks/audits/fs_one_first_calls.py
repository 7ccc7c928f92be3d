"""The first call of every held-out sample on the fs_one family, by the kind of task: which tool the model named (one
of the family's tools, or a name it made up), or no call (text) or a malformed one. Reads an `evolvekit eval`'s
trajectories file, or a run's store (its evaluations before and after training, and the training rollouts' first
calls per iteration).

    PYTHONPATH=src .venv/bin/python benchmarks/audits/fs_one_first_calls.py \
        runs/fs_one_base_self/results.trajectories.jsonl
    PYTHONPATH=src .venv/bin/python benchmarks/audits/fs_one_first_calls.py \
        runs/evidence_fs_one/self_examples/seed0/run.sqlite

Results: benchmarks/results/second_environment.md."""

from __future__ import annotations

import collections
import json
import sqlite3
import sys
from pathlib import Path
from typing import Iterator


def trajectories(path: Path) -> Iterator[tuple[str, dict]]:
    """(phase, trajectory) of every episode: "eval" for a trajectories file; a store's phase (and iteration)."""
    if path.suffix == ".sqlite":
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            for phase, iteration, body in con.execute("SELECT phase, iteration, json FROM trajectories"):
                yield (phase if phase.startswith("eval") else f"{phase} {iteration}"), json.loads(body)
        finally:
            con.close()
        return
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            yield "eval", json.loads(line)


def first_call(traj: dict) -> str:
    calls = [c["name"] for s in traj["steps"] for c in s["tool_calls"]]
    if calls:
        return calls[0]
    return "(malformed)" if any(s["parse_error"] for s in traj["steps"]) else "(text)"


def main() -> None:
    from evolvekit.env.bfcl.families import get_family

    family = get_family("fs_one")
    tasks = {t.task_id: t for t in family.tasks("test", 48)}

    def kind(task_id: str) -> str:
        reference = tasks[task_id].reference_solution
        assert reference is not None  # the family's own tasks carry their reference
        call = reference[0][0]
        if call.name != "mv":
            return call.name
        return "mv (rename)" if "." in call.arguments["destination"] else "mv (into a folder)"

    by_phase: dict[str, dict[str, collections.Counter]] = collections.defaultdict(
        lambda: collections.defaultdict(collections.Counter)
    )
    for phase, traj in trajectories(Path(sys.argv[1])):
        group = kind(traj["task_id"]) if phase.startswith("eval") else "training tasks"
        by_phase[phase][group][first_call(traj)] += 1
    for phase in sorted(by_phase, key=lambda p: (not p.startswith("eval_b"), p)):
        named: collections.Counter = collections.Counter()
        print(f"== {phase}")
        for group, counts in sorted(by_phase[phase].items()):
            print(f"  {group}: {dict(counts.most_common())}")
            for name, n in counts.items():
                if not name.startswith("("):
                    named["a tool of the family" if name in family.tools else "another name"] += n
        print("  first calls naming:", dict(named))


if __name__ == "__main__":
    main()
