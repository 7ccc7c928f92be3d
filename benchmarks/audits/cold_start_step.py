"""One cold-start (SFT) optimizer batch, forward and backward: the shared-prefix pass against the plain one.

    .venv/bin/python benchmarks/audits/cold_start_step.py --batch 16 --reps 3

The batch is what the cold start trains on (train/sft.py: ``reference_pairs``): ``--batch`` of the ``--family``
train split's tasks as the rollout shows them (system prompt, tools, worked examples, the task) with their reference
calls, the replayed tool result and the closing turn. Both sides: the same SmolLM2-135M weights, full fine-tune,
micro-batches of ``--micro``, autocast ``--autocast`` (the trainer's ``auto`` is bf16 on a CPU with AVX512-BF16).
Each rep times both sides back to back (alternating which goes first); prints the tokens forwarded by each, the
median seconds per batch, the plain/shared ratio of the medians and the largest relative gap of their losses
(float summation order only: tests/cpu/test_cold_start.py checks fp32 gradients equal).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="embedded:smollm2-135m-instruct")
    ap.add_argument("--family", default="arith")
    ap.add_argument("--batch", type=int, default=16, help="pairs per optimizer batch (cold_start.batch_size)")
    ap.add_argument("--micro", type=int, default=4, help="train.micro_batch_size")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--autocast", default="auto", choices=["auto", "off", "bf16"])
    args = ap.parse_args()

    import torch

    from evolvekit.agent.templates import TemplateSettings
    from evolvekit.config import EnvConfig, TrainConfig
    from evolvekit.env.bfcl.families import get_family
    from evolvekit.env.registry import make_env
    from evolvekit.llm.local import LocalLLM
    from evolvekit.train.sft import SFTStats, batch_backward, reference_pairs
    from evolvekit.train.trainer import GRPOTrainer

    torch.manual_seed(0)
    llm = LocalLLM(args.model, device="cpu")
    tasks = get_family(args.family).tasks("train", args.batch)
    env = lambda: make_env(EnvConfig(name="bfcl", family=args.family))  # noqa: E731
    pairs = reference_pairs(tasks, env, llm, "compact", TemplateSettings(), limit=args.batch)
    trainers = {
        name: GRPOTrainer(llm, TrainConfig(shared_prefix=shared, micro_batch_size=args.micro, autocast=args.autocast))
        for name, shared in (("plain", False), ("shared", True))
    }
    seconds: dict[str, list[float]] = {"plain": [], "shared": []}
    tokens: dict[str, int] = {}
    gap = 0.0
    for rep in range(args.reps + 1):  # rep 0 warms up and is not timed
        losses = {}
        for name in ("plain", "shared") if rep % 2 else ("shared", "plain"):
            trainers[name].model.zero_grad(set_to_none=True)
            stats = SFTStats()
            t0 = time.perf_counter()
            losses[name] = batch_backward(trainers[name], pairs, stats)
            if rep:
                seconds[name].append(time.perf_counter() - t0)
            tokens[name] = stats.tokens
        gap = max(gap, abs(losses["plain"] - losses["shared"]) / abs(losses["plain"]))
    med = {k: statistics.median(v) for k, v in seconds.items()}
    print(
        json.dumps(
            {
                "pairs": len(pairs),
                "tokens_in_batch": sum(len(p.token_ids) for p in pairs),
                "tokens_forwarded": tokens,
                "seconds_median": {k: round(v, 2) for k, v in med.items()},
                "seconds_all": {k: [round(x, 2) for x in v] for k, v in seconds.items()},
                "plain_over_shared": round(med["plain"] / med["shared"], 2),
                "autocast": str(trainers["plain"].amp),
                "loss_relative_gap_max": float(f"{gap:.2e}"),
                "torch_threads": torch.get_num_threads(),
            }
        )
    )


if __name__ == "__main__":
    main()
