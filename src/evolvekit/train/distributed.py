"""Data-parallel updates on torch.distributed, set up by accelerate (``accelerate launch`` or ``torchrun``).

Every process holds a full replica of the policy and its optimizer. Rank 0 runs the master loop (rollouts and the
environment stay where they are) and hands each update's samples to all ranks; every rank runs the forward and
backward passes of its share of the micro-batches (whole shared-prefix groups, dealt round robin), the gradients
are summed across ranks (each rank's loss already uses the whole mini-batch's token count as its denominator, so
the sum is the single-process gradient), and every rank takes the same optimizer step. The replicas therefore stay
equal without any weight broadcast. Tested with two gloo processes against one process (tests/cpu/test_distributed.py).
"""

from __future__ import annotations

import os
from typing import Any, Sequence, TypeVar

import torch

T = TypeVar("T")


def launched_world_size() -> int:
    """The number of processes ``torchrun`` / ``accelerate launch`` started (1 outside them)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


class DataParallel:
    """The update's process group: which share of the work is this rank's, and the collectives it needs."""

    def __init__(self, backend: str | None = None) -> None:
        from accelerate import PartialState

        # accelerate's default (NCCL) with GPUs, else gloo; a CPU-only job on a GPU machine names gloo
        backend = backend or (None if torch.cuda.is_available() else "gloo")
        self.state = PartialState(backend=backend)
        self.rank, self.world = self.state.process_index, self.state.num_processes

    @classmethod
    def from_environment(cls, backend: str | None = None) -> DataParallel | None:
        """A process group when launched with more than one process, else None (the plain single-process path)."""
        return cls(backend) if launched_world_size() > 1 else None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's share, round robin (every rank sees the same ``items`` in the same order)."""
        return list(items[self.rank :: self.world])

    def all_reduce_grads(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Sum the gradients of ``params`` over all ranks, in one flat buffer (a rank without work adds zeros)."""
        import torch.distributed as dist

        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1).to(torch.float32) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p, g in zip(params, grads):
            n = g.numel()
            p.grad = flat[offset : offset + n].view_as(g).to(g.dtype)
            offset += n

    def sum_values(self, values: dict[str, float]) -> dict[str, float]:
        """Sum float statistics over ranks (keys missing on a rank count as 0)."""
        import torch.distributed as dist

        gathered: list[Any] = [None] * self.world
        dist.all_gather_object(gathered, values)
        out: dict[str, float] = {}
        for part in gathered:
            for k, v in part.items():
                out[k] = out.get(k, 0.0) + float(v)
        return out

    def broadcast(self, obj: T | None) -> T:
        """Rank 0's ``obj`` on every rank."""
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]  # type: ignore[return-value]

    def barrier(self) -> None:
        self.state.wait_for_everyone()
