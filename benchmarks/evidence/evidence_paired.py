"""Two rows of an evidence report, paired by seed after training: the difference's mean ± std, its t-interval, the
exact sign-flip p and how many seeds are above and below 0 (the seeds both rows have finished).

    .venv/bin/python benchmarks/evidence/evidence_paired.py benchmarks/results/evidence_credit_fix.json \
        grpo_person_nav_attr_fixed grpo_person grpo_person_nav_attr
    .venv/bin/python benchmarks/evidence/evidence_paired.py benchmarks/results/evidence_self_examples.json \
        self_examples format_only --metrics avg@8 arith_panel2_v1/avg@8 class/no_call@8 class/right@8
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from evolvekit.report.evidence import paired


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, help="an evidence report's JSON (benchmarks/results/evidence_*.json)")
    ap.add_argument("row", help="the row compared")
    ap.add_argument("others", nargs="+", help="the rows it is compared with")
    ap.add_argument(
        "--metrics", nargs="+", default=["avg@8", "best@8"], help="per-seed figures compared (a second panel's too)"
    )
    args = ap.parse_args()
    rows = json.loads(args.results.read_text())["rows"]

    def after(name: str, metric: str, seeds: list[int]) -> list[float]:
        r = rows[name]
        by_seed = dict(zip(r["seeds"], r["per_seed_after"][metric]))
        return [by_seed[s] for s in seeds]

    print(f"| {args.row} minus | metric | mean ± std [interval] | sign-flip p | above / below 0 | seeds |")
    print("|---|---|---|---|---|---|")
    for other in args.others:
        seeds = sorted(set(rows[args.row]["seeds"]) & set(rows[other]["seeds"]))
        for metric in args.metrics:
            p = paired(after(args.row, metric, seeds), after(other, metric, seeds))
            i = p.interval
            above, below = sum(x > 0 for x in p.diffs), sum(x < 0 for x in p.diffs)
            spread = f"± {i.std:.3f} [{i.low:+.3f}, {i.high:+.3f}]" if len(seeds) > 1 else "(one seed: no spread)"
            print(
                f"| {other} | {metric} | {i.mean:+.3f} {spread} | {p.sign_flip_p:.4f} | "
                f"{above} / {below} | {len(seeds)} |"
            )


if __name__ == "__main__":
    main()
