"""Aggregate the seeds of one learning benchmark: held-out avg@k per evaluation point, mean ± std over seeds.

    .venv/bin/python benchmarks/evidence/learning_seeds.py learning_grpo_seed0 learning_grpo_seed1 learning_grpo_seed2

Reads benchmarks/results/<name>.json for each name and writes benchmarks/results/<prefix>_seeds.{md,png}
(prefix: the common part of the names, e.g. learning_grpo).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning_attribution import _curve

ROOT = Path(__file__).resolve().parents[2]


def _points(result: dict, k: int) -> dict[int, float]:
    """Evaluation point (0 = before training, i = after iteration i) -> held-out avg@k."""
    return dict(zip(*_curve(result, k)))


def aggregate(results: list[dict], k: int) -> list[dict]:
    """Per evaluation point that every seed has: the mean, the sample std and the per-seed values."""
    per_seed = [_points(r, k) for r in results]
    common = sorted(set.intersection(*(set(p) for p in per_seed)))
    rows = []
    for x in common:
        vals = [p[x] for p in per_seed]
        rows.append(
            {
                "iteration": x,
                "mean": round(statistics.fmean(vals), 4),
                "std": round(statistics.stdev(vals), 4) if len(vals) > 1 else 0.0,
                "values": vals,
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="+", help="result names under benchmarks/results (without .json)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    results = [json.loads((args.out / f"{n}.json").read_text()) for n in args.names]
    k = results[0]["config"]["eval_k"]
    rows = aggregate(results, k)
    prefix = os.path.commonprefix(args.names).rstrip("_").removesuffix("_seed")
    seeds = [r["config"]["seed"] for r in results]
    lines = [
        f"# {prefix}: held-out avg@{k} over seeds {seeds}",
        "",
        f"command: `.venv/bin/python benchmarks/evidence/learning_seeds.py {' '.join(args.names)}`",
        "",
        f"per-seed runs: {', '.join(f'{n}.md' for n in args.names)} (the command of each is in its md)",
        "",
        f"| iteration | mean avg@{k} | std | per seed |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {'before' if r['iteration'] == 0 else r['iteration']} | {r['mean']} | {r['std']} | "
        f"{', '.join(str(v) for v in r['values'])} |"
        for r in rows
    ]
    (args.out / f"{prefix}_seeds.md").write_text("\n".join(lines) + "\n")
    (args.out / f"{prefix}_seeds.json").write_text(
        json.dumps({"names": args.names, "seeds": seeds, "k": k, "curve": rows}, indent=2)
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, res in zip(args.names, results):
        pts = sorted(_points(res, k).items())
        ax.plot([p[0] for p in pts], [p[1] for p in pts], alpha=0.35, marker=".", label=name)
    xs, mean, std = [r["iteration"] for r in rows], [r["mean"] for r in rows], [r["std"] for r in rows]
    ax.errorbar(xs, mean, yerr=std, color="black", marker="o", capsize=4, label="mean ± std")
    ax.set_xlabel("iteration (0 = before training)")
    ax.set_ylabel(f"held-out avg@{k}")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out / f"{prefix}_seeds.png", dpi=120)
    plt.close(fig)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
