"""Data-parallel updates on torch.distributed, set up by accelerate (``accelerate launch`` or ``torchrun``).

Every process holds a full replica of the policy and its optimizer. Rank 0 runs the master loop (rollouts and the
environment stay where they are) and hands each update's samples to all ranks; every rank runs the forward and
backward passes of its share of the micro-batches (whole shared-prefix groups, dealt round robin), the gradients
are summed across ranks (each rank's loss already uses the whole mini-batch's token count as its denominator, so
the sum is the single-process gradient), and every rank takes the same optimizer step. The replicas therefore stay
equal without any weight broadcast. Tested with two gloo processes against one process (tests/cpu/test_distributed.py).

With ``train.sharding: fsdp2`` (``ShardedPolicy``) the ranks instead train one FSDP2-sharded copy of the policy
(``torch.distributed.fsdp.fully_shard`` per decoder layer and at the root): parameters, gradients and AdamW state
are split across ranks, held in fp32 (the master weights) with compute in the model's own dtype. Every rank runs
the same number of forward/backward passes (ranks with fewer micro-batches run zero-weighted ones), as FSDP's
collectives require. After each update the full weights are gathered to rank 0's policy, which the rollouts use.
"""

from __future__ import annotations

import copy
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

    def max_int(self, value: int) -> int:
        """The largest ``value`` over ranks."""
        import torch.distributed as dist

        box = torch.tensor([value], dtype=torch.long)
        dist.all_reduce(box, op=dist.ReduceOp.MAX)
        return int(box.item())

    def broadcast(self, obj: T | None) -> T:
        """Rank 0's ``obj`` on every rank."""
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]  # type: ignore[return-value]

    def barrier(self) -> None:
        self.state.wait_for_everyone()


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The blocks FSDP2 shards one by one: transformers' ``_no_split_modules`` classes (the decoder layers)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    return [m for m in model.modules() if type(m).__name__ in names]


class ShardedPolicy:
    """An FSDP2-sharded training copy of the policy (``train.sharding: fsdp2``); ``model`` is what the update runs.

    FSDP2 averages gradients over ranks; the trainer's losses are already divided by the whole mini-batch's token
    count, so it multiplies each rank's loss by ``world`` (``loss_scale``) to get the single-process gradient.
    """

    def __init__(self, policy: torch.nn.Module, parallel: DataParallel) -> None:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        from evolvekit.llm.packed import unpack_linears

        self.parallel = parallel
        self.dtype = next(policy.parameters()).dtype
        model = copy.deepcopy(policy)
        unpack_linears(model)  # the training copy runs plain linears (packing is for rank 0's inference copy)
        model.float()  # fp32 shards are the master weights
        mp = (
            MixedPrecisionPolicy(param_dtype=self.dtype, reduce_dtype=torch.float32)
            if self.dtype != torch.float32
            else MixedPrecisionPolicy()
        )
        layers = decoder_layers(model)
        if not layers:
            raise ValueError("train.sharding fsdp2: the policy names no decoder layer classes (_no_split_modules)")
        for layer in layers:
            fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        self.model: Any = model
        self.loss_scale = float(parallel.world)

    def sync_to(self, engine: Any) -> None:
        """Gather the full weights (a collective: every rank calls it) into rank 0's rollout engine
        (``RolloutEngine.update_weights``, llm/base.py)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if self.parallel.is_main:
            engine.update_weights(full)

    def full_optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The whole optimizer state on rank 0 (a collective; other ranks get an empty dict)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        return get_optimizer_state_dict(
            self.model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        """Restore a whole optimizer state (as ``full_optimizer_state`` gave it) into this rank's shards."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(
            self.model, optimizer, optim_state_dict=state, options=StateDictOptions(full_state_dict=True)
        )
