"""Plain GRPO with SmolLM2-135M on the `arith` task family: the baseline every later mechanism is compared with.

Why this task set: on real BFCL tasks the 135M model succeeds in ~0-1% of samples and GRPO learns nothing from
groups that all fail. On `arith` (BFCL's MathAPI restricted to four tools, three worked examples as chat turns,
official checker) the untrained model succeeds on roughly 30% of held-out samples — inside the 5-50% band where
GRPO groups have mixed outcomes. See docs/training.md.

    .venv/bin/python benchmarks/evidence/learning_grpo.py --iterations 12 --eval-every 4

Writes benchmarks/results/learning_grpo.{json,png,md}: held-out avg@k/best@k before training and every
``--eval-every`` iterations, plus train-rollout success per iteration.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def parser(description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--eval-every", type=int, default=4)
    ap.add_argument("--eval-tasks", type=int, default=40)
    ap.add_argument("--eval-k", type=int, default=2)
    ap.add_argument("--tasks-per-iteration", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=6)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="embedded:smollm2-135m-instruct")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--tag", default="", help="suffix of the result files, e.g. _seed1 for a multi-seed study")
    return ap


def run_learning(name: str, args, extra_sets: list[str], title: str) -> dict:
    """Run the master loop with the benchmark budget; write benchmarks/results/<name>.{json,png,md}."""

    from evolvekit.config import load_config
    from evolvekit.orchestrator.build import build_loop
    from evolvekit.orchestrator.run_dir import open_run

    name = name + args.tag
    sets = [
        f"run.name={name.replace('_', '-')}",
        "run.out_dir=runs",
        f"run.seed={args.seed}",
        f"train.iterations={args.iterations}",
        f"train.eval_every={args.eval_every}",
        f"train.eval_tasks={args.eval_tasks}",
        f"train.eval_k={args.eval_k}",
        f"train.tasks_per_iteration={args.tasks_per_iteration}",
        f"rollout.group_size={args.group_size}",
        f"train.learning_rate={args.lr}",
        f"models.policy.model={args.model}",
        "train.eval_after=false",
        *extra_sets,
        *args.overrides,
    ]
    # plain GRPO (configs/grpo.yaml) on the single-call family, as the quickstart was when these figures were made
    family = ["env.family=arith", "rollout.max_steps=3"]
    cfg = load_config(ROOT / "configs" / "grpo.yaml", [*family, *sets])
    cfg, run_dir, store = open_run(cfg, None)
    t0 = time.perf_counter()
    summary = build_loop(cfg, run_dir, store, show_progress=False).run()
    seconds = time.perf_counter() - t0
    metrics = store.metrics()
    before = store.evaluation("before") or {}
    k = cfg.train.eval_k
    curve = [{"iteration": -1, f"avg@{k}": before.get(f"avg@{k}"), f"best@{k}": before.get(f"best@{k}")}]
    cold = store.evaluation("cold_start")
    if cold:  # cold start on: the warm-up's effect alone, before any RL
        curve.append(
            {
                "iteration": -1,
                "phase": "cold_start",
                f"avg@{k}": cold.get(f"avg@{k}"),
                f"best@{k}": cold.get(f"best@{k}"),
            }
        )
    curve += [
        {"iteration": it, f"avg@{k}": m[f"eval/avg@{k}"], f"best@{k}": m[f"eval/best@{k}"]}
        for it, m in sorted(metrics.items())
        if f"eval/avg@{k}" in m
    ]
    train = [
        {
            "iteration": it,
            "success_rate": m.get("rollout/success_rate"),
            "reward_mean": m.get("rollout/reward_mean"),
            "parse_error_rate": m.get("rollout/parse_error_rate"),
            "degenerate_groups": m.get("samples/degenerate_groups"),
            "iteration_s": m.get("time/iteration_s"),
        }
        for it, m in sorted(metrics.items())
    ]
    result = {
        "benchmark": name,
        "task_set": "bfcl family 'arith' (MathAPI add/subtract/multiply/divide, "
        "3 chat-turn examples), held-out = family test split",
        "model": args.model,
        "seconds": round(seconds),
        "config": {k_: v for k_, v in vars(args).items() if k_ not in ("out",)},
        "heldout_curve": curve,
        "train_curve": train,
        "run_dir": str(run_dir),
    }
    result["config"]["out"] = str(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=2, default=str))
    shutil.copy(summary["learning_curve"], args.out / f"{name}.png")
    command = "$ .venv/bin/python " + " ".join(["benchmarks/" + Path(sys.argv[0]).name, *sys.argv[1:]])
    lines = [
        f"# {name} ({title}, SmolLM2-135M, CPU)",
        "",
        f"command: `{command}`",
        "",
        f"task set: {result['task_set']}",
        f"budget: {args.iterations} iterations × {args.tasks_per_iteration} tasks × {args.group_size} rollouts, "
        f"lr {args.lr}, wall time {seconds / 60:.1f} min",
        "",
        f"| iteration | held-out avg@{k} | best@{k} |",
        "|---|---|---|",
    ]
    lines += [
        f"| {r.get('phase') or ('before' if r['iteration'] < 0 else r['iteration'] + 1)} | {r[f'avg@{k}']} | "
        f"{r[f'best@{k}']} |"
        for r in curve
    ]
    (args.out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print(json.dumps({"heldout_curve": curve, "seconds": round(seconds)}))
    store.close()
    return result


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    run_learning("learning_grpo", args, [], "plain GRPO")


if __name__ == "__main__":
    sys.exit(main())
