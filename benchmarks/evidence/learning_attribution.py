"""GRPO + self-attributing (AgentEvolver §5) with the same budget as benchmarks/evidence/learning_grpo.py.

    .venv/bin/python benchmarks/evidence/learning_attribution.py --iterations 12 --eval-every 4

Writes benchmarks/results/learning_attribution.{json,png,md}, learning_attribution_vs_grpo.png (both held-out
curves on one figure) and, next to the baseline's curve
(benchmarks/results/learning_grpo.json, run that first), Steps@0.9 (iterations to reach 90% of the baseline's
best held-out avg@k) and the area under the held-out curve for both, as in the paper's Table 6. The attributor
role defaults to the embedded model; point `--set models.attributor.backend=openai ...` at a stronger served model
for labels worth having (its parse-failure rate is in the metrics: neutralised trajectories fall back to GRPO).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning_grpo import parser, run_learning  # noqa: E402


def _curve(result: dict, k: int) -> tuple[list[float], list[float]]:
    pts = [
        (r["iteration"] + 1, r[f"avg@{k}"])
        for r in result["heldout_curve"]
        if r.get(f"avg@{k}") is not None and not r.get("phase")
    ]
    return [p[0] for p in pts], [p[1] for p in pts]


def plot_against_baseline(base: dict, result: dict, k: int, path: Path, label: str = "GRPO + self-attributing") -> None:
    """Both held-out curves on one figure (iteration 0 = before training)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, res in (("GRPO (baseline)", base), (label, result)):
        ax.plot(*_curve(res, k), marker="o", label=name)
    ax.set_xlabel("iteration")
    ax.set_ylabel(f"held-out avg@{k}")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    from evolvekit.attributing.efficiency import area_under_curve, steps_to_fraction

    result = run_learning("learning_attribution", args, ["attributing.enabled=true"], "GRPO + self-attributing")
    base_path = args.out / "learning_grpo.json"
    if not base_path.is_file():
        print(f"no baseline at {base_path}; run benchmarks/evidence/learning_grpo.py with the same budget first")
        return
    base = json.loads(base_path.read_text())
    k = args.eval_k
    bx, by = _curve(base, k)
    ax, ay = _curve(result, k)
    target = 0.9 * max(by)
    table = {
        "baseline_best": max(by),
        "target": target,
        "grpo": {"steps@0.9": steps_to_fraction(bx, by, target), "auc": area_under_curve(bx, by)},
        "attribution": {"steps@0.9": steps_to_fraction(ax, ay, target), "auc": area_under_curve(ax, ay)},
    }
    result["efficiency"] = table
    plot_against_baseline(base, result, k, args.out / "learning_attribution_vs_grpo.png")
    (args.out / "learning_attribution.json").write_text(json.dumps(result, indent=2, default=str))
    md = args.out / "learning_attribution.md"
    md.write_text(
        md.read_text()
        + "\n| method | Steps@0.9 | AUC |\n|---|---|---|\n"
        + "".join(f"| {m} | {table[m]['steps@0.9']} | {table[m]['auc']:.3f} |\n" for m in ("grpo", "attribution"))
    )
    print(json.dumps(table))


if __name__ == "__main__":
    main()
