"""Helper health with every helper role embedded (SmolLM2-135M): is each self-evolving mechanism's helper alive?

    .venv/bin/python benchmarks/evidence/helper_health.py --iterations 3 --out benchmarks/results/helper_health.md

Runs ``evolvekit run configs/quickstart.yaml`` with self-questioning, self-navigating and self-attributing on (the
ablation's `overall` row) and the helper sources on their embedded defaults (``config show`` prints them:
attributor grounded, judge constrained, extraction grounded + constrained), then reads the run's metrics:

- attribution: groups with mixed outcomes, and the share of them whose attribution channel (Eq. 18) was not
  constant — a constant channel contributes nothing (target ≥ 80%);
- judge: fallback rate over synthetic-task trajectories (target 0 with the constrained judge) and its agreement
  with the environment's state check;
- extraction: the share of extraction jobs (cold start included) that yielded at least one validated experience
  (target ≥ 50%), and how many were written from execution (grounded).

Run nothing else on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

BUDGET = [
    "train.tasks_per_iteration=3",
    "rollout.group_size=4",
    "train.eval_before=false",
    "train.eval_after=false",
    "questioning.enabled=true",
    "navigating.enabled=true",
    "attributing.enabled=true",
    "questioning.synthetic_tasks=8",
    "questioning.explore_runs=4",
    "questioning.explore_steps=4",
    "questioning.difficulty.operations=1",
    "models.explorer.max_new_tokens=48",
    "models.synthesizer.max_new_tokens=48",
]


def run(config: str, iterations: int, seed: int, out_dir: Path, extra: list[str]) -> tuple[list[dict], dict]:
    sets = [
        *BUDGET,
        f"train.iterations={iterations}",
        f"run.seed={seed}",
        f"run.out_dir={out_dir}",
        f"run.name=health-{seed}",
        *extra,
    ]
    cmd = [sys.executable, "-m", "evolvekit.cli.main", "run", config, "--no-progress", "--json"]
    for s in sets:
        cmd += ["--set", s]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    run_dir = Path(summary["run_dir"])
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    import sqlite3

    con = sqlite3.connect(run_dir / "run.sqlite")
    sources = json.loads(con.execute("SELECT value FROM meta WHERE key = 'helper_sources'").fetchone()[0])
    con.close()
    return metrics, sources


def total(metrics: list[dict], key: str) -> float:
    return sum(float(m.get(key, 0.0)) for m in metrics)


def weighted(metrics: list[dict], share: str, count: str) -> tuple[float, float]:
    """(Σ share·count, Σ count) over iterations."""
    return sum(float(m.get(share, 0.0)) * float(m.get(count, 0.0)) for m in metrics), total(metrics, count)


def health(metrics: list[dict]) -> dict:
    mixed, live = total(metrics, "attribution/mixed_groups"), total(metrics, "attribution/mixed_groups_nondegenerate")
    judged = total(metrics, "judge/calls")
    fallbacks = total(metrics, "judge/fallbacks")
    agree = [float(m["judge/agreement_with_state"]) for m in metrics if "judge/agreement_with_state" in m]
    const = [float(m["judge/constant_agreement"]) for m in metrics if "judge/constant_agreement" in m]
    v1, n1 = weighted(metrics, "navigating/validated_share", "navigating/extraction_jobs")
    v0, n0 = weighted(metrics, "navigating/cold_start_validated_share", "navigating/cold_start_extraction_jobs")
    return {
        "mixed_groups": mixed,
        "mixed_groups_nondegenerate": live,
        "nondegenerate_share": live / mixed if mixed else None,
        "groups": total(metrics, "samples/groups"),
        "constant_channel_groups": total(metrics, "attribution/constant_channel_groups"),
        "good_ratio": [round(float(m.get("attribution/good_ratio", 0.0)), 3) for m in metrics],
        "judge_calls": judged,
        "judge_fallbacks": fallbacks,
        "judge_fallback_rate": fallbacks / judged if judged else None,
        "judge_agreement_with_state": sum(agree) / len(agree) if agree else None,
        "judge_constant_agreement": sum(const) / len(const) if const else None,  # the baseline a judge must beat
        "extraction_jobs": n0 + n1,
        "validated_jobs": round(v0 + v1),
        "validated_share": (v0 + v1) / (n0 + n1) if n0 + n1 else None,
        "grounded_experiences": total(metrics, "navigating/grounded_experiences"),
        "unparseable": total(metrics, "navigating/unparseable"),
        "rejected": total(metrics, "navigating/rejected"),
        "pool_size": [float(m.get("navigating/pool_size", 0.0)) for m in metrics],
        "iteration_s": [round(float(m.get("time/iteration_s", 0.0))) for m in metrics],
        "success_rate": [round(float(m.get("rollout/success_rate", 0.0)), 3) for m in metrics],
        "state_check_success": [round(float(m.get("rollout/synthetic_state_score", 0.0)), 3) for m in metrics],
    }


def _fmt(v) -> str:
    if v is None:
        return "n/a"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--set", dest="extra", action="append", default=[], help="extra override (repeatable)")
    ap.add_argument("--out", default=None, help="also write the table to this markdown file")
    ap.add_argument("--runs", default="runs/helper_health", help="where the runs are kept (for report/dashboard)")
    args = ap.parse_args()
    rows = {}
    for seed in args.seeds:
        metrics, sources = run(args.config, args.iterations, seed, Path(args.runs), args.extra)
        rows[seed] = {**health(metrics), "sources": sources}
    keys = [
        "sources",
        "mixed_groups",
        "mixed_groups_nondegenerate",
        "nondegenerate_share",
        "groups",
        "constant_channel_groups",
        "good_ratio",
        "judge_calls",
        "judge_fallbacks",
        "judge_fallback_rate",
        "judge_agreement_with_state",
        "extraction_jobs",
        "validated_jobs",
        "validated_share",
        "grounded_experiences",
        "unparseable",
        "rejected",
        "pool_size",
        "success_rate",
        "state_check_success",
        "iteration_s",
    ]
    table = ["| figure | " + " | ".join(f"seed {s}" for s in rows) + " |", "|---|" + "---|" * len(rows)]
    for k in keys:
        table.append(f"| {k} | " + " | ".join(_fmt(r[k]) for r in rows.values()) + " |")
    text = "\n".join(table)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
        Path(args.out).with_suffix(".json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
