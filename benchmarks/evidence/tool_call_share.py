"""Per seed, how many training rollouts of the first iterations call a tool at all, read from each run's store.

The credit-fix spec's secondary endpoint (configs/evidence/evidence_credit_fix.yaml): a policy that stops calling tools
early is what collapsed grpo_person_nav_attr's seed 3.

    .venv/bin/python benchmarks/evidence/tool_call_share.py runs/evidence_env_only grpo_person grpo_person_nav_attr \
        grpo_person_nav_attr_fixed --iterations 0 1

Prints one Markdown table: a row per seed, a column per evidence row, "calls/rollouts" in each cell ("—" where the
seed has not finished: no summary.json).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path


def tool_call_share(run: Path, iterations: list[int]) -> tuple[int, int] | None:
    """(rollouts with at least one tool call, rollouts) among the run's training trajectories of ``iterations``;
    None when the run has not finished."""
    if not (run / "summary.json").is_file():
        return None
    marks = ",".join("?" * len(iterations))
    con = sqlite3.connect(f"file:{run / 'run.sqlite'}?mode=ro", uri=True)
    try:
        rows = con.execute(
            f"select json from trajectories where phase = 'train' and iteration in ({marks})", iterations
        ).fetchall()
    finally:
        con.close()
    calls = sum(1 for (text,) in rows if any(step.get("tool_calls") for step in json.loads(text)["steps"]))
    return calls, len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="the evidence spec's out_dir (one folder per row)")
    parser.add_argument("rows", nargs="+")
    parser.add_argument("--iterations", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    args = parser.parse_args()
    print("| seed | " + " | ".join(args.rows) + " |")
    print("|---|" + "---|" * len(args.rows))
    for seed in args.seeds:
        cells = []
        for row in args.rows:
            found = tool_call_share(args.out_dir / row / f"seed{seed}", args.iterations)
            cells.append("—" if found is None else f"{found[0]}/{found[1]}")
        print(f"| {seed} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
