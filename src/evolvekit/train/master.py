"""fp32 master weights for low-precision (bf16/fp16) parameters: a small step moves them as an fp32 run does.

AdamW applied in place to bf16 weights rounds every update to bf16's 8-bit mantissa: at the paper's learning rate
of 1e-6 an update is far below half a bf16 ulp of a typical weight (~1e-4 at 0.02), so most weights never move.
Mixed-precision training keeps an fp32 copy of each low-precision parameter: the optimizer updates the copy (its
state is fp32 too), and after every step the model's bf16 weights are the copy rounded to bf16. Small updates
then accumulate in the copy until they cross a bf16 step, exactly as the rounded fp32 run's weights do
(tests/cpu/test_master_weights.py). fp32 parameters are left to the optimizer as they are.
"""

from __future__ import annotations

from typing import Sequence

import torch


def needs_master(params: Sequence[torch.nn.Parameter]) -> bool:
    """Whether any trainable parameter is stored in less than fp32 precision."""
    return any(p.dtype in (torch.bfloat16, torch.float16) for p in params)


class MasterWeights:
    """fp32 copies of low-precision parameters, stepped by the optimizer in their place.

    Use: build the optimizer over ``optim_params``; after backward call ``to_master_grads()`` (before clipping:
    the norm is then taken on the fp32 gradients), ``optimizer.step()``, then ``to_model()``.
    """

    def __init__(self, params: Sequence[torch.nn.Parameter]) -> None:
        self.model_params = list(params)
        self.masters: list[torch.Tensor | None] = []
        self.optim_params: list[torch.nn.Parameter] = []
        for p in self.model_params:
            if p.dtype in (torch.bfloat16, torch.float16):
                m = torch.nn.Parameter(p.detach().to(torch.float32).clone())
                self.masters.append(m)
                self.optim_params.append(m)
            else:
                self.masters.append(None)
                self.optim_params.append(p)

    def to_master_grads(self) -> None:
        """Move every low-precision gradient onto its fp32 copy (as fp32) and free the model's."""
        for p, m in zip(self.model_params, self.masters):
            if m is None:
                continue
            m.grad = None if p.grad is None else p.grad.detach().to(torch.float32)
            p.grad = None

    @torch.no_grad()
    def to_model(self) -> None:
        """Write the fp32 copies back into the model's low-precision weights (round to nearest)."""
        for p, m in zip(self.model_params, self.masters):
            if m is not None:
                p.copy_(m.to(p.dtype))

    def state_dict(self) -> dict[str, list[torch.Tensor | None]]:
        return {"masters": [None if m is None else m.detach().clone() for m in self.masters]}

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        """Restore the fp32 copies of a checkpoint (a resumed run continues from the exact fp32 weights)."""
        saved = state["masters"]
        if len(saved) != len(self.masters):
            raise ValueError(f"master weights for {len(saved)} parameters, the model has {len(self.masters)}")
        for m, s in zip(self.masters, saved):
            if (m is None) != (s is None):
                raise ValueError("master weights do not match the model's low-precision parameters")
            if m is not None and s is not None:
                m.copy_(s)
        self.to_model()
