"""Prepacked oneDNN weights for the linear layers of a model served on CPU.

At a decode batch of a few rows, ``torch.nn.functional.linear`` goes to MKL's sgemm, which re-packs the whole weight
matrix on every call (``sgemm_scopy``: 30% of a batch-8 decode step of SmolLM2-135M on this CPU, by ``perf``), so a
step reads every weight twice. oneDNN's matmul on a weight reordered once into its blocked layout skips that copy:
measured 61 -> 44 ms per decode step at batch 1 and 109 -> 61-69 ms at batch 8 (benchmarks/speed/rollout_throughput.py,
benchmarks/results/rollout_throughput.txt).

Only inference uses the packed copy: with gradients enabled (training) or under autocast a layer runs its own
``forward``, so autograd sees the real parameter and autocast keeps its dtype. The copy follows the weight: it is
rebuilt when the weight tensor is replaced or changed in place (its version counter moves, e.g. after
``optimizer.step()``). Results equal ``F.linear`` up to fp32 summation order (~1e-5).
"""

from __future__ import annotations

import functools
import types

import torch
import torch.nn.functional as F

PACKABLE_DTYPES = (torch.float32, torch.bfloat16)


@functools.lru_cache(maxsize=None)
def can_pack(dtype: torch.dtype) -> bool:
    """Whether oneDNN can pack weights of ``dtype`` on this CPU (bf16 needs AVX-512 BW/VL/DQ or AVX-NE-CONVERT;
    an AVX2-only CPU packs fp32 only). Probed once on a tiny weight."""
    if dtype not in PACKABLE_DTYPES:
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(8, 8, dtype=dtype), None)
        return True
    except RuntimeError:
        return False


class _PackedWeight:
    """A Linear's packed weight and the identity of the weight it was packed from. Never copied with the model."""

    __slots__ = ("source", "packed")

    def __init__(self) -> None:
        self.source: tuple | None = None
        self.packed: torch.Tensor | None = None

    def __deepcopy__(self, memo) -> _PackedWeight:
        return _PackedWeight()

    def __getstate__(self):
        return None

    def __setstate__(self, state) -> None:
        self.source = self.packed = None


def _source(weight: torch.Tensor) -> tuple:
    return weight.data_ptr(), weight._version, weight.dtype, tuple(weight.shape)


def packed_linear_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``nn.Linear.forward`` through the packed weight whenever gradients are off and the input suits it.

    Installed as a bound method, so a deep-copied model's layers use their own weights (and pack them afresh).
    """
    w = self.weight
    cache: _PackedWeight = self.__dict__["_packed_weight"]
    if (
        torch.is_grad_enabled()
        or torch.is_autocast_enabled("cpu")
        or x.device.type != "cpu"
        or x.dtype != w.dtype
        or x.dim() == 0
        or torch.is_inference(w)
        or not can_pack(w.dtype)
    ):
        return F.linear(x, w, self.bias)
    src = _source(w)
    if cache.source != src:
        cache.packed = torch.ops.mkldnn._reorder_linear_weight(w.detach(), None)
        cache.source = src
    flat = x.reshape(-1, x.shape[-1])
    y = torch.ops.mkldnn._linear_pointwise(flat, cache.packed, self.bias, "none", [None], "")
    return y.reshape(*x.shape[:-1], y.shape[-1])


def packing_supported(model: torch.nn.Module) -> bool:
    """oneDNN is built in and the model's weights are on CPU in a packable dtype."""
    p = next(model.parameters(), None)
    return (
        p is not None
        and p.device.type == "cpu"
        and p.dtype in PACKABLE_DTYPES
        and can_pack(p.dtype)
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


def pack_linears(model: torch.nn.Module) -> int:
    """Route every plain ``nn.Linear`` of ``model`` through a packed weight at inference; returns how many.

    Subclasses of ``nn.Linear`` (quantised layers and the like) keep their own forward. Idempotent.
    """
    if not packing_supported(model):
        return 0
    n = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear and "_packed_weight" not in module.__dict__:
            module.__dict__["_packed_weight"] = _PackedWeight()
            module.forward = types.MethodType(packed_linear_forward, module)  # type: ignore[method-assign]  # per instance
            n += 1
    return n


def unpack_linears(model: torch.nn.Module) -> int:
    """Undo ``pack_linears``: every layer runs its own forward again; returns how many were restored."""
    n = 0
    for module in model.modules():
        if module.__dict__.pop("_packed_weight", None) is not None:
            module.__dict__.pop("forward", None)
            n += 1
    return n
