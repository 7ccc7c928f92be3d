"""Does gold-free step credit say anything the outcome does not? Read from a row's own run stores.

    .venv/bin/python benchmarks/audits/credit_redundancy.py runs/evidence_env_only/env_only

For every training group of every seed's store: its kind (mixed outcomes, all failed, all passed); whether the
attribution channel was live (the trajectories' average attribution rewards differ) and, in mixed groups, whether
its order agrees with the outcome's (every passed trajectory above every failed one); and how far Eq. 18-21's
advantages at α = 0.1 move from the outcome channel's alone (sum of |A − A_outcome_only| against sum of
|A_outcome_only|). Also the success rate of experience-guided against vanilla training rollouts. Prints one JSON
object. The success threshold is 0.5, the runs' own.
"""

from __future__ import annotations

import argparse
import collections
import json
import sqlite3
from pathlib import Path

from evolvekit.attributing.credit import group_step_advantages
from evolvekit.types import StepLabel

WEIGHT = {StepLabel.GOOD.value: 1.0, StepLabel.BAD.value: -1.0, StepLabel.NEUTRAL.value: 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("row", type=Path, help="a row's folder of seed<k>/run.sqlite stores")
    ap.add_argument("--alpha", type=float, default=0.1)
    args = ap.parse_args()
    count: collections.Counter = collections.Counter()
    moved: collections.Counter = collections.Counter()
    success: dict[str, list[bool]] = {"guided": [], "vanilla": []}
    for db in sorted(args.row.glob("seed*/run.sqlite")):
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        rows = con.execute(
            "select trajectory_id, group_id, outcome_reward, experience_guided from trajectories "
            "where phase = 'train' and failed = 0"
        ).fetchall()
        labels: dict[str, list[str]] = collections.defaultdict(list)
        for tid, lab in con.execute(
            "select s.trajectory_id, s.label from steps s join trajectories t using (trajectory_id) "
            "where t.phase = 'train' order by s.trajectory_id, s.step_index"
        ):
            labels[tid].append(lab)
        groups: dict[str, list[tuple[str, float]]] = collections.defaultdict(list)
        for tid, gid, reward, guided in rows:
            groups[gid].append((tid, float(reward or 0.0)))
            success["guided" if guided else "vanilla"].append(float(reward or 0.0) >= 0.5)
        for members in groups.values():
            passed = [r >= 0.5 for _, r in members]
            kind = "mixed" if len(set(passed)) > 1 else ("all_passed" if passed[0] else "all_failed")
            count[kind] += 1
            labs = [labels[t] for t, _ in members]
            if any(not lab or None in lab for lab in labs):
                count[f"{kind}_unlabelled"] += 1
                continue
            avgs = [sum(WEIGHT[x] for x in lab) / len(lab) for lab in labs]
            if len(set(avgs)) > 1:
                count[f"{kind}_attribution_live"] += 1
                if kind == "mixed":
                    agree = all(a > b for a, p in zip(avgs, passed) for b, q in zip(avgs, passed) if p and not q)
                    count["mixed_attribution_order_agrees_with_outcome" if agree else "mixed_disagrees"] += 1
            step_labels = [[StepLabel(x) for x in lab] for lab in labs]
            outcomes, sizes = [r for _, r in members], [len(lab) for lab in labs]
            full = group_step_advantages(step_labels, outcomes, sizes, alpha=args.alpha)
            alone = group_step_advantages(step_labels, outcomes, sizes, alpha=args.alpha, mode="outcome_only")
            for f, o in zip(full, alone):
                moved[f"{kind}_sum_abs_change"] += sum(abs(a - b) for a, b in zip(f, o))
                moved[f"{kind}_sum_abs_outcome_only"] += sum(abs(b) for b in o)
    out = {
        "groups": dict(count),
        "advantages": {k: round(v, 2) for k, v in moved.items()},
        "success": {
            k: {"rollouts": len(v), "rate": round(sum(v) / len(v), 3) if v else None} for k, v in success.items()
        },  # fmt: skip
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
