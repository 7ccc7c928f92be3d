"""Where the untrained embedded model starts on a task family: avg@k, best@k, and the share of tasks with mixed
outcomes over k samples (the groups GRPO learns from), plus what the samples did on multi-step tasks.

    .venv/bin/python benchmarks/evidence/family_baseline.py --families arith arith_chain arith_turns fs_chain \
        --out benchmarks/results/family_baseline.md

Runs ``evolvekit eval`` on each family's held-out (test) split with the quickstart's rollout settings and reads
the per-task results and trajectories it writes. "first call right": the first executed call equals the reference's
first call (argument forms normalised, agent/calls.py); "2+ calls": the sample made at least two tool calls.
Run nothing else on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def evaluate(family: str, k: int, limit: int, max_steps: int, seed: int, out: Path) -> dict:
    from evolvekit.agent.calls import call_key
    from evolvekit.env.bfcl.families import get_family
    from evolvekit.types import Trajectory

    results = out / f"{family}.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "evolvekit.cli.main",
        "eval",
        "--config",
        "configs/quickstart.yaml",
        "--set",
        f"env.family={family}",
        "--set",
        f"rollout.max_steps={max_steps}",
        "--set",
        f"run.seed={seed}",
        "--subset",
        "test",
        "--k",
        str(k),
        "--limit",
        str(limit),
        "--out",
        str(results),
        "--json",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    rows = [json.loads(x) for x in results.read_text().splitlines()]
    wins = [sum(s >= 1.0 for s in r["scores"]) for r in rows]
    tasks = {t.task_id: t for t in get_family(family).tasks("test", limit)}
    trajs = [
        Trajectory.model_validate_json(x)
        for x in results.with_name(results.stem + ".trajectories.jsonl").read_text().splitlines()
    ]
    first_right = multi = 0
    for t in trajs:
        calls = [
            c for s in t.steps for c, o in zip(s.tool_calls, s.calls or [None] * len(s.tool_calls)) if o is None or o.ok
        ]
        ref = tasks[t.task_id].reference_solution[0]
        first_right += bool(calls) and call_key(calls[0]) == call_key(ref[0])
        multi += len(calls) >= 2
    n = len(trajs) or 1
    return {
        "family": family,
        "tasks": len(rows),
        "k": k,
        f"avg@{k}": summary[f"avg@{k}"],
        f"best@{k}": summary[f"best@{k}"],
        "mixed_share": sum(0 < w < k for w in wins) / len(rows),
        "first_call_right": first_right / n,
        "two_plus_calls": multi / n,
        "wins_per_task": wins,
        "mean_wins": statistics.mean(wins),
        "seconds": summary.get("seconds"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="+", default=["arith", "arith_chain", "arith_turns", "fs_chain"])
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--limit", type=int, default=24, help="held-out tasks per family")
    ap.add_argument("--max-steps", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also write the table to this markdown file (+ .json)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for fam in args.families:
            rows.append(evaluate(fam, args.k, args.limit, args.max_steps, args.seed, Path(tmp)))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "wins_per_task"}), flush=True)
    k = args.k
    table = [
        f"| family | tasks | avg@{k} | best@{k} | tasks with mixed outcomes | first call right | 2+ calls | s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        table.append(
            f"| {r['family']} | {r['tasks']} | {r[f'avg@{k}']:.3f} | {r[f'best@{k}']:.3f} | "
            f"{r['mixed_share']:.2f} | {r['first_call_right']:.2f} | {r['two_plus_calls']:.2f} | "
            f"{r['seconds']} |"
        )
    text = "\n".join(table)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
        Path(args.out).with_suffix(".json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
