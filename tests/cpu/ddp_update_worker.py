"""One GRPO update of a tiny model on a fixed batch; started by tests/cpu/test_distributed.py either plainly or
under ``torchrun --nproc_per_node 2`` (gloo). Writes the loss, statistics and updated weights of its rank."""

import os
import sys
from pathlib import Path

import torch

from evolvekit.config import TrainConfig
from evolvekit.llm.local import LocalLLM
from evolvekit.train.distributed import DataParallel
from evolvekit.train.trainer import GRPOTrainer
from evolvekit.types import TrainingSample


def samples() -> list[TrainingSample]:
    out = []
    for i in range(6):
        n = 12 + 3 * i
        prompt = [5, 9, 13, 17, 21, 25] if i < 4 else [6, 8, 10, 12, 14, 16]  # two shared prompts
        ids = (prompt + [(7 * i + j) % 400 + 30 for j in range(n)])[:n]
        mask = [0] * 6 + [1] * (n - 6)
        out.append(
            TrainingSample(
                trajectory_id=f"t{i}",
                group_id="g0" if i < 4 else "g1",
                token_ids=ids,
                loss_mask=mask,
                token_advantages=[0.0] * 6 + [(-1.0) ** i * (0.5 + 0.1 * i)] * (n - 6),
                experience_mask=[0] * n,
            )
        )
    return out


def main(model: str, out: str, shared_prefix: str, sharding: str = "replicate") -> None:
    device = os.environ.get("DDP_WORKER_DEVICE", "cpu")  # tests/gpu sets cuda: each rank then uses its own GPU
    parallel = DataParallel.from_environment("gloo" if device == "cpu" else None)
    if parallel is not None and device == "cuda":
        device = str(parallel.state.device)
    llm = LocalLLM(model, device=device)
    cfg = TrainConfig(
        learning_rate=1e-3,
        micro_batch_size=1,
        autocast="off",
        kl_beta=0.0,
        shared_prefix=shared_prefix == "on",
        sharding=sharding,
    )
    trainer = GRPOTrainer(llm, cfg, parallel=parallel)
    initial = {n: p.detach().cpu().clone() for n, p in llm.model.named_parameters()}
    stats = trainer.update(samples())
    rank = parallel.rank if parallel else 0
    policy = {n: p.detach().cpu().clone() for n, p in llm.model.named_parameters()}  # what rank 0's rollouts use
    # the trained weights and gradients, whole (FSDP2's shards gathered: a collective, in the same order everywhere)
    trained = list(trainer.model.named_parameters())
    weights = {n: _whole(p.detach()) for n, p in trained}
    grads = {n: _whole(p.grad) for n, p in trained if p.grad is not None}
    torch.save(
        {"stats": stats.as_metrics(), "weights": weights, "initial": initial, "grads": grads, "policy": policy},
        Path(out) / f"rank{rank}.pt",
    )


def _whole(t: torch.Tensor) -> torch.Tensor:
    full = t.full_tensor() if hasattr(t, "full_tensor") else t
    return full.cpu().clone()


if __name__ == "__main__":
    main(*sys.argv[1:5])
