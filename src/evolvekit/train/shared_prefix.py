"""Shared-prefix training: a group's common token prefix runs forward (and backward) once.

A GRPO group's samples share their prompt — system prompt, tools, worked examples, task — and, in multi-turn
episodes, sometimes more. Computing each sample's log-probabilities over its whole sequence repeats that prefix
once per sample, in the forward and in the backward pass, and again for the reference and old-policy passes.

Here a group (samples with one ``group_id``, or any set) whose longest common token prefix P is long enough runs:

1. one forward over P with the KV cache on, keeping the logits of the prefix positions that predict a loss token
   (usually just the last one, which predicts each sample's first suffix token);
2. for each micro-batch of members, a forward over their suffixes that attends to P's keys and values. The prefix
   KV and logits enter as *leaf* tensors (detached, ``requires_grad``), so each micro-batch's backward stops there and
   accumulates their gradients;
3. after the last micro-batch, one backward through the prefix forward with those accumulated gradients.

The loss and every parameter gradient equal the unshared computation up to float summation order (tests:
tests/cpu/test_shared_prefix.py, on a tiny model and on SmolLM2). No-grad passes (old and reference log-probs) use
steps 1–2 without leaves.

``Row`` log-probabilities come back exactly shaped like ``trainer.sequence_logprobs`` over the members' padded
batch: ``[b, W]`` with position ``t`` holding log π(x_t | x_<t) for ``t ≥ start`` and 0 before it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from evolvekit.llm.sampling import common_prefix_len  # the sampler's prefix cache uses the same

__all__ = ["common_prefix_len", "share_groups", "SharedPrefixStep", "prefix_forward", "suffix_logprobs"]

MIN_SHARED = 32  # shorter common prefixes are not worth a separate pass


def share_groups(
    token_ids: Sequence[Sequence[int]], keys: Sequence[str], min_shared: int = MIN_SHARED
) -> list[tuple[list[int], int]]:
    """Partition sample indices into (members, shared prefix length) by ``keys`` (e.g. group ids), in first-seen
    order. The prefix leaves every member at least one token of its own; a group of one, or with a common prefix
    shorter than ``min_shared``, is returned with prefix 0 (the plain path)."""
    order: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        order.setdefault(k, []).append(i)
    out = []
    for members in order.values():
        seqs = [token_ids[i] for i in members]
        p = min(common_prefix_len(seqs), min(len(s) for s in seqs) - 1) if len(members) > 1 else 0
        out.append((members, p if p >= min_shared else 0))
    return out


@dataclass
class PrefixPass:
    """Step 1's results: the prefix's KV per layer and the logits of its positions ``keep_from .. p-1``."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    logits: torch.Tensor | None  # [1, p - keep_from, V], or None when no prefix position predicts a loss token
    keep_from: int
    length: int


def _autocast(device: torch.device, amp: torch.dtype | None):
    return torch.autocast(device.type, dtype=amp) if amp is not None else contextlib.nullcontext()


def prefix_forward(model, prefix: torch.Tensor, start: int, amp: torch.dtype | None) -> PrefixPass:
    """Run ``prefix`` ([p] token ids) once. ``start``: the first target position any member scores (≥ 1)."""
    p = prefix.shape[0]
    keep_from = max(0, start - 1)
    keep = p - keep_from if keep_from < p else 0
    with _autocast(prefix.device, amp):
        out = model(input_ids=prefix[None], use_cache=True, logits_to_keep=max(1, keep))
    cache = out.past_key_values
    kv = [(layer.keys, layer.values) for layer in cache.layers]
    logits = out.logits[:, -keep:] if keep else None
    return PrefixPass(kv=kv, logits=logits, keep_from=keep_from, length=p)


def _detached(pre: PrefixPass) -> PrefixPass:
    """The same prefix with leaf tensors that collect the suffixes' gradients (step 2)."""
    kv = [(k.detach().requires_grad_(True), v.detach().requires_grad_(True)) for k, v in pre.kv]
    logits = pre.logits.detach().requires_grad_(True) if pre.logits is not None else None
    return PrefixPass(kv=kv, logits=logits, keep_from=pre.keep_from, length=pre.length)


def suffix_logprobs(
    model,
    pre: PrefixPass,
    ids: torch.Tensor,
    lengths: Sequence[int],
    start: int,
    amp: torch.dtype | None,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of full sequences ``ids`` ([b, W], right-padded, each row starting with the prefix) from the
    prefix pass and one forward over their suffixes; shaped like ``sequence_logprobs`` (0 before ``start``)."""
    from transformers import DynamicCache

    b, W = ids.shape
    p = pre.length
    L = W - p
    cache = DynamicCache(ddp_cache_data=[(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)) for k, v in pre.kv])
    attn = torch.zeros((b, W), dtype=torch.long, device=ids.device)
    for i, n in enumerate(lengths):
        attn[i, :n] = 1
    first_sfx = max(0, start - 1 - p)  # first suffix position whose logits predict a scored token
    keep = L - first_sfx
    with _autocast(ids.device, amp):
        out = model(
            input_ids=ids[:, p:], attention_mask=attn, past_key_values=cache, use_cache=True, logits_to_keep=keep
        )
    sfx = out.logits[:, -keep:][:, :-1]  # suffix positions first_sfx+p .. W-2 (the last predicts past the end)
    parts = ([pre.logits.expand(b, -1, -1)] if pre.logits is not None else []) + [sfx]
    logits = torch.cat([x.float() for x in parts], dim=1)  # positions s0-1 .. W-2, s0 = first scored target
    s0 = W - logits.shape[1]
    targets = ids[:, s0:]
    V = logits.shape[-1]
    logp = -F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="none").view(b, -1)
    ent = None
    if with_entropy:
        lsm = torch.log_softmax(logits, dim=-1)
        ent = F.pad(-(lsm.exp() * lsm).sum(-1), (s0, 0))
    return F.pad(logp, (s0, 0)), ent


class SharedPrefixStep:
    """One group's training pass: ``run(micro_batches, loss_fn)`` backpropagates every micro-batch's loss and, at the
    end, the prefix once. ``loss_fn(micro_index, logp, entropy) -> loss`` builds the micro-batch's loss from its
    rows' log-probs (shaped like ``sequence_logprobs`` over that micro-batch's padded batch)."""

    def __init__(self, model, prefix: torch.Tensor, start: int, amp: torch.dtype | None) -> None:
        self.model, self.start, self.amp = model, start, amp
        self.graph = prefix_forward(model, prefix, start, amp)
        self.leaves = _detached(self.graph)

    def run(
        self,
        micro_batches: Sequence[tuple[torch.Tensor, Sequence[int]]],
        with_entropy: bool,
        loss_fn: Callable[[int, torch.Tensor, torch.Tensor | None], torch.Tensor],
    ) -> None:
        for m, (ids, lengths) in enumerate(micro_batches):
            logp, ent = suffix_logprobs(self.model, self.leaves, ids, lengths, self.start, self.amp, with_entropy)
            loss_fn(m, logp, ent).backward()
        outputs, grads = [], []
        for (k, v), (k_leaf, v_leaf) in zip(self.graph.kv, self.leaves.kv):
            for t, leaf in ((k, k_leaf), (v, v_leaf)):
                if leaf.grad is not None and t.requires_grad:
                    outputs.append(t)
                    grads.append(leaf.grad)
        if self.graph.logits is not None and self.leaves.logits is not None and self.leaves.logits.grad is not None:
            outputs.append(self.graph.logits)
            grads.append(self.leaves.logits.grad)
        if outputs:
            torch.autograd.backward(outputs, grads)  # the prefix, once, with every suffix's gradient
