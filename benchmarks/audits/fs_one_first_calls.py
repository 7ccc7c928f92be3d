"""The first call of every sample of an `evolvekit eval` on the fs_one family, by the kind of task: which tool the
model named (one of the family's tools, or a name it made up), or no call (text) or a malformed one.

    PYTHONPATH=src .venv/bin/python benchmarks/audits/fs_one_first_calls.py \
        runs/fs_one_base_self/results.trajectories.jsonl

Results: benchmarks/results/second_environment.md."""

from __future__ import annotations

import collections
import json
import sys


def main() -> None:
    from evolvekit.env.bfcl.families import get_family

    family = get_family("fs_one")
    tasks = {t.task_id: t for t in family.tasks("test", 48)}

    def kind(task_id: str) -> str:
        call = tasks[task_id].reference_solution[0][0]
        if call.name != "mv":
            return call.name
        return "mv (rename)" if "." in call.arguments["destination"] else "mv (into a folder)"

    by_kind: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    named: collections.Counter = collections.Counter()
    with open(sys.argv[1], encoding="utf-8") as fh:
        for line in fh:
            traj = json.loads(line)
            calls = [c["name"] for s in traj["steps"] for c in s["tool_calls"]]
            malformed = any(s["parse_error"] for s in traj["steps"])
            first = calls[0] if calls else ("(malformed)" if malformed else "(text)")
            by_kind[kind(traj["task_id"])][first] += 1
            if calls:
                named["a tool of the family" if first in family.tools else "a made-up name"] += 1
    for k, counts in sorted(by_kind.items()):
        print(f"{k}: {dict(counts.most_common())}")
    print("first calls naming:", dict(named))


if __name__ == "__main__":
    main()
