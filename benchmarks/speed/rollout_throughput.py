"""Rollout throughput: sequential vs. batched rollouts with the embedded policy on CPU.

    .venv/bin/python benchmarks/speed/rollout_throughput.py --rollouts 32 --concurrency 8

Runs the same rollouts (``arith`` family tasks, BFCL MathAPI backend) once with concurrency 1 and once with
``--concurrency`` (8) rollouts decoding together in one continuous batch (rows join as soon as their previous
action was executed, new episodes start as others end, shared-prefix KV reuse), and prints trajectories/s and
generated tokens/s for both (target: batched >= 4x sequential tokens/s at 8 concurrent rollouts).
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rollouts", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--max-steps", type=int, default=3)
    ap.add_argument("--model", default="embedded:smollm2-135m-instruct")
    ap.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16"],
        help="policy weights dtype (auto: fp32 on CPU)",
    )
    args = ap.parse_args()

    from evolvekit.agent.rollout import RolloutJob, run_rollouts
    from evolvekit.config import EnvConfig, RolloutConfig
    from evolvekit.engine.base import Engine
    from evolvekit.env.bfcl.families import get_family
    from evolvekit.env.registry import make_env
    from evolvekit.llm.base import SamplingParams
    from evolvekit.llm.local import LocalLLM

    llm = LocalLLM(args.model, device="cpu", dtype=args.dtype)
    env_cfg = EnvConfig(name="bfcl", family="arith")
    tasks = get_family("arith").tasks("dev", args.rollouts)
    jobs = [RolloutJob(task=t) for t in tasks]
    params = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    rows = {}
    for name, conc in (("sequential", 1), ("batched", args.concurrency)):
        cfg = RolloutConfig(max_steps=args.max_steps, group_size=1, concurrency=conc)
        llm.invalidate_cache()  # both runs start cold: neither inherits the other's shared-prefix KV
        t0 = time.perf_counter()
        trajs = run_rollouts(jobs, lambda: make_env(env_cfg), Engine(llm), cfg, params, "compact", show_progress=False)
        dt = time.perf_counter() - t0
        gen = sum(t.metadata.get("completion_tokens", 0) for t in trajs)
        rows[name] = {
            "seconds": round(dt, 2),
            "trajectories_per_s": round(len(trajs) / dt, 3),
            "generated_tokens": gen,
            "generated_tokens_per_s": round(gen / dt, 1),
            "prompt_tokens": sum(t.metadata.get("prompt_tokens", 0) for t in trajs),
        }
        print(
            f"{name:>10}: {rows[name]['trajectories_per_s']:.3f} traj/s, "
            f"{rows[name]['generated_tokens_per_s']:.1f} generated tok/s ({dt:.1f}s)",
            flush=True,
        )
    speedup = rows["batched"]["generated_tokens_per_s"] / max(rows["sequential"]["generated_tokens_per_s"], 1e-9)
    print(
        json.dumps(
            {
                **rows,
                "speedup_tokens_per_s": round(speedup, 2),
                "rollouts": args.rollouts,
                "concurrency": args.concurrency,
                "dtype": args.dtype,
            }
        )
    )


if __name__ == "__main__":
    main()
