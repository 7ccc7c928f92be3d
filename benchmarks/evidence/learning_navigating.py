"""GRPO + self-navigating (AgentEvolver §4) with the same budget as benchmarks/evidence/learning_grpo.py.

    .venv/bin/python benchmarks/evidence/learning_navigating.py --iterations 12 --eval-every 4

Three comparisons, written to benchmarks/results/learning_navigating.{json,png,md}:

1. Held-out success *without* experience over the run (the loop's evaluations are vanilla rollouts), next to the
   plain GRPO baseline's curve (benchmarks/results/learning_grpo<tag>.json, run that first): Steps@0.9 and AUC.
   This is what the navigating mechanism (guided rollouts, experience stripping, selective boosting) is for: a
   policy that is better on its own.
2. Experience-guided vs vanilla rollout reward per training iteration (the loop's navigating/guided_reward and
   navigating/vanilla_reward): the in-context lift of retrieved experience on the family's training tasks.
3. Held-out avg@k of the base model and of the final policy, each without and with the run's final experience pool
   retrieved into the prompt (top-1, as in training): the test-time lift.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning_attribution import _curve, plot_against_baseline
from learning_grpo import parser, run_learning


def _heldout_with_and_without(run_dir: Path, k: int, n_tasks: int) -> dict:
    """avg@k / best@k on the held-out split for {base, final} policy × {no experience, final pool}.

    The "without experience" cells are the loop's own evaluations (``eval_before`` and the last iteration's eval, the
    same tasks and k); each "with experience" cell re-runs that evaluation with the same sampling seed and the final
    pool retrieved into the prompt, so every pair differs only by the retrieved experience.
    """
    from evolvekit.agent.evaluate import evaluate_policy
    from evolvekit.cli.eval_cmd import _experience_lookup
    from evolvekit.engine.base import Engine
    from evolvekit.env.registry import env_tasks, make_env
    from evolvekit.llm.factory import role_llm, sampling_for
    from evolvekit.orchestrator.loop import iteration_seed
    from evolvekit.orchestrator.run_dir import open_run

    cfg, _, store = open_run(None, run_dir)
    ckpt = store.latest_checkpoint()
    experiences = store.experiences()
    pool_file = run_dir / "final_pool.jsonl"  # the format of `evolvekit experiences export`
    pool_file.write_text("".join(e.model_dump_json() + "\n" for e in experiences))
    n_exp = len(experiences)
    before = store.evaluation("before") or {}
    evals = {it: m for it, m in store.metrics().items() if f"eval/avg@{k}" in m}
    store.close()
    tasks = env_tasks(cfg.env, cfg.env.eval_split)[:n_tasks]
    lookup = _experience_lookup(cfg, pool_file) if n_exp else None
    out: dict = {"pool_size": n_exp, "tasks": len(tasks), "k": k}
    cells = [("base", cfg.models.policy.model, -1, before)]
    last = max(evals) if evals else None
    if ckpt is not None and last is not None and last == ckpt.iteration:
        m = evals[last]
        cells.append(("final", ckpt.path, last, {f"avg@{k}": m[f"eval/avg@{k}"], f"best@{k}": m[f"eval/best@{k}"]}))
    for name, model, it, without in cells:
        if without.get(f"avg@{k}") is not None:
            out[f"{name}/without_experience"] = {key: round(without[key], 4) for key in (f"avg@{k}", f"best@{k}")}
        if lookup is None:
            continue
        models = cfg.models.model_copy(update={"policy": cfg.models.policy.model_copy(update={"model": model})})
        llm = role_llm(models, "policy")
        params = sampling_for(models.policy, seed=iteration_seed(cfg.run.seed, 10_000 + it))
        report, _ = evaluate_policy(
            tasks,
            lambda: make_env(cfg.env),
            Engine(llm),
            cfg.rollout,
            params,
            k,
            cfg.env.tool_rendering,
            show_progress=False,
            experience_for=lookup,
        )
        out[f"{name}/with_experience"] = {
            f"avg@{k}": round(report.avg_at_k, 4),
            f"best@{k}": round(report.best_at_k, 4),
        }
        del llm
    return out


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    from evolvekit.attributing.efficiency import area_under_curve, steps_to_fraction

    result = run_learning("learning_navigating", args, ["navigating.enabled=true"], "GRPO + self-navigating")
    k = args.eval_k
    from evolvekit.report.figures import connect_ro, metrics_table

    con = connect_ro(Path(result["run_dir"]))
    metrics = metrics_table(con)
    con.close()
    guided = [
        {
            "iteration": it + 1,
            "guided_reward": m.get("navigating/guided_reward"),
            "vanilla_reward": m.get("navigating/vanilla_reward"),
            "pool_size": m.get("navigating/pool_size"),
        }
        for it, m in sorted(metrics.items())
    ]
    result["guided_vs_vanilla"] = guided
    result["test_time"] = _heldout_with_and_without(Path(result["run_dir"]), k, args.eval_tasks)
    lines = [
        "",
        "## Experience-guided vs vanilla rollouts (training tasks, mean reward per iteration)",
        "",
        "| iteration | guided | vanilla | pool size |",
        "|---|---|---|---|",
    ]
    lines += [f"| {g['iteration']} | {g['guided_reward']} | {g['vanilla_reward']} | {g['pool_size']} |" for g in guided]
    tt = result["test_time"]
    lines += [
        "",
        f"## Held-out avg@{k} with and without the final experience pool ({tt['pool_size']} experiences, top-1)",
        "",
        "| policy | without experience | with experience |",
        "|---|---|---|",
    ]
    for name in ("base", "final"):
        if f"{name}/without_experience" in tt:
            w = tt.get(f"{name}/with_experience", {}).get(f"avg@{k}", "—")
            lines.append(f"| {name} | {tt[f'{name}/without_experience'][f'avg@{k}']} | {w} |")
    base_path = args.out / f"learning_grpo{args.tag}.json"
    if base_path.is_file():
        base = json.loads(base_path.read_text())
        bx, by = _curve(base, k)
        nx, ny = _curve(result, k)
        if by and ny:
            target = 0.9 * max(by)
            table = {
                "baseline_best": max(by),
                "target": target,
                "grpo": {"steps@0.9": steps_to_fraction(bx, by, target), "auc": area_under_curve(bx, by)},
                "navigating": {"steps@0.9": steps_to_fraction(nx, ny, target), "auc": area_under_curve(nx, ny)},
            }
            result["efficiency"] = table
            plot_against_baseline(
                base,
                result,
                k,
                args.out / f"learning_navigating{args.tag}_vs_grpo.png",
                "GRPO + self-navigating (no experience at eval)",
            )
            lines += [
                "",
                f"## Held-out without experience vs plain GRPO ({base_path.name})",
                "",
                "| method | Steps@0.9 | AUC |",
                "|---|---|---|",
            ]
            lines += [f"| {m} | {table[m]['steps@0.9']} | {table[m]['auc']:.3f} |" for m in ("grpo", "navigating")]
    else:
        lines += [
            "",
            f"(no baseline at {base_path}: run benchmarks/evidence/learning_grpo.py with the same budget and tag)",
        ]
    name = "learning_navigating" + args.tag
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=2, default=str))
    md = args.out / f"{name}.md"
    md.write_text(md.read_text() + "\n".join(lines) + "\n")
    print(json.dumps({"test_time": tt, "efficiency": result.get("efficiency")}))


if __name__ == "__main__":
    main()
