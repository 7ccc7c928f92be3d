"""Rollout tokens/s of one commit's code, for a paired comparison of two commits (issue 55: the engine seam must
keep rollout throughput within 5%).

    git worktree add /tmp/before <commit>
    for i in 1 2 3; do
      PYTHONPATH=/tmp/before/src .venv/bin/python benchmarks/speed/rollout_tokens_per_s.py before
      PYTHONPATH=src .venv/bin/python benchmarks/speed/rollout_tokens_per_s.py after
    done

16 ``arith`` rollouts (3 steps, 48 tokens, seed 0) with the embedded policy, 8 at a time, after a 2-rollout
warm-up; prints one JSON line. A second argument repeats each task (``... after 4``: 64 rollouts, a steadier
figure). Code before the seam took the LLM, after it an ``Engine``: both are handled.
Results: benchmarks/results/engine_seam.md."""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    import torch

    from evolvekit.agent.rollout import RolloutJob, run_rollouts
    from evolvekit.config import EnvConfig, RolloutConfig
    from evolvekit.env.bfcl.families import get_family
    from evolvekit.env.registry import make_env
    from evolvekit.llm.base import SamplingParams
    from evolvekit.llm.local import LocalLLM

    try:
        from evolvekit.engine.base import Engine as wrap
    except ImportError:  # code from before the engine seam

        def wrap(llm):  # type: ignore[misc]
            return llm

    torch.set_num_threads(2)
    llm = LocalLLM("embedded:smollm2-135m-instruct", device="cpu")
    env_cfg = EnvConfig(name="bfcl", family="arith")
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 1  # each task this many times (longer, steadier runs)
    jobs = [RolloutJob(task=t) for t in get_family("arith").tasks("dev", 16) for _ in range(repeats)]
    params = SamplingParams(temperature=1.0, max_new_tokens=48, seed=0)
    cfg = RolloutConfig(max_steps=3, concurrency=8)
    run_rollouts(jobs[:2], lambda: make_env(env_cfg), wrap(llm), cfg, params, show_progress=False)  # warm-up
    t0 = time.perf_counter()
    trajs = run_rollouts(jobs, lambda: make_env(env_cfg), wrap(llm), cfg, params, show_progress=False)
    dt = time.perf_counter() - t0
    gen = sum(len(s.completion_token_ids) for t in trajs for s in t.steps)
    code = sys.argv[1] if len(sys.argv) > 1 else "this"
    print(json.dumps({"code": code, "seconds": round(dt, 2), "tokens": gen, "tokens_per_s": round(gen / dt, 1)}))


if __name__ == "__main__":
    main()
