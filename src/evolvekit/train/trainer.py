"""The local GRPO trainer: one update of a transformers policy from training samples (AgentEvolver §6.4).

Full fine-tune or LoRA (peft), AdamW, gradient clipping, micro-batching (gradients accumulated with the token
count of the whole mini-batch as denominator, so micro-batching does not change the update), old log-probs
recomputed before the update, reference log-probs for the KL term, bf16 autocast on CPUs that support it.
The model object is the one the rollout sampler uses, so rollouts always come from the current policy.

``update`` reads as its steps: the log-probs every epoch compares against (old, behaviour, reference: no-grad
passes, plain or shared-prefix), then per mini-batch: collate, the forward pass (plain or shared-prefix), the pure
loss of Eq. 17 (``train/losses.py: policy_loss``), backward, and one optimizer step of the policy
(``train/policy.py: Policy.step``, which owns the model, optimizer and master weights); it ends by publishing the
new weights to the engine (``Policy.publish``).
"""

from __future__ import annotations

import json
import logging
import random
import time
import zlib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from evolvekit.config import TrainConfig
from evolvekit.engine.base import Engine
from evolvekit.engine.registry import seam
from evolvekit.resolve import Machine, autocast_for
from evolvekit.train.distributed import DataParallel, ShardedPolicy
from evolvekit.train.losses import policy_loss, ratio_diagnostics
from evolvekit.train.master import MasterWeights
from evolvekit.train.policy import Policy
from evolvekit.train.shared_prefix import SharedPrefixStep, prefix_forward, share_groups, suffix_logprobs
from evolvekit.types import TrainingSample

log = logging.getLogger(__name__)


@dataclass
class UpdateStats:
    loss: float = 0.0
    pg_loss: float = 0.0
    kl: float = 0.0
    entropy: float = 0.0
    clip_frac: float = 0.0
    ratio: float = 1.0
    grad_norm: float = 0.0
    sequences: int = 0
    tokens: int = 0  # all tokens forwarded (prompt + completion; a shared prefix counts once)
    shared_prefix_tokens: int = 0  # tokens not forwarded again thanks to shared-prefix training
    policy_tokens: int = 0  # tokens in the loss
    optimizer_steps: int = 0
    seconds: float = 0.0
    tokens_per_s: float = 0.0
    # Eq. 17 diagnostics, separately for experience-guided and vanilla samples (shares of their loss tokens)
    guided_tokens: int = 0
    guided_clip_frac: float = 0.0
    guided_ratio_dev: float = 0.0  # mean |ρ − 1|
    vanilla_clip_frac: float = 0.0
    vanilla_ratio_dev: float = 0.0
    boost_changed_share: float = 0.0  # guided tokens whose gradient the selective boost (ε̂_high) changed
    behaviour_logprob_gap: float = 0.0  # mean |sampler's recorded − trainer's recomputed| old log-prob, guided tokens

    def as_metrics(self, prefix: str = "train/") -> dict[str, float]:
        return {prefix + k: float(v) for k, v in asdict(self).items()}


@dataclass
class _Anchors:
    """Per sample (by index): the old, behaviour (guided samples only) and reference log-probs of an update."""

    old: list[torch.Tensor] | None
    behaviour: dict[int, torch.Tensor]
    ref: list[torch.Tensor] | None


@dataclass
class _Accumulated:
    """What an update's backward passes add up: loss statistics weighted by tokens, ratio diagnostics, counts."""

    stats: UpdateStats
    agg: dict[str, float] = field(default_factory=dict)
    diag: dict[str, float] = field(default_factory=dict)
    weight_total: float = 0.0


_STAT_FIELDS = frozenset(f.name for f in fields(UpdateStats))


def autocast_dtype(setting: str, device: torch.device) -> torch.dtype | None:
    """bf16 autocast where it helps: CUDA, or a CPU with AVX512-BF16/AMX (``auto``, resolve.py: autocast_for, what
    ``config show`` prints); ``off`` disables it."""
    chosen = autocast_for(setting, str(device), Machine.probe().cpu_bf16 if setting == "auto" else False)
    return torch.bfloat16 if chosen == "bf16" else None


def sequence_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    amp: torch.dtype | None,
    with_entropy: bool = False,
    start: int = 1,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(token_t | tokens_<t) for positions t ≥ ``start`` (earlier positions get 0), shape [B, T].

    Only the logits from position ``start − 1`` on are computed (``logits_to_keep``): the prompt before the first
    loss token never needs the vocabulary projection.
    """
    T = input_ids.shape[1]
    start = max(1, min(start, T - 1))
    keep = T - start + 1
    ctx = torch.autocast(input_ids.device.type, dtype=amp) if amp is not None else _null()
    with ctx:
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, logits_to_keep=keep).logits
    logits = logits[:, -keep:-1].float()
    targets = input_ids[:, start:]
    B, T1, V = logits.shape
    logp = -F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="none").view(B, T1)
    ent = None
    if with_entropy:
        lsm = torch.log_softmax(logits, dim=-1)
        ent = F.pad(-(lsm.exp() * lsm).sum(-1), (start, 0))
    return F.pad(logp, (start, 0)), ent


def first_loss_position(mask: torch.Tensor) -> int:
    cols = mask.any(dim=0).nonzero()
    return int(cols[0]) if len(cols) else 1


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def group_scales(samples: Sequence[TrainingSample], total_tokens: float) -> list[float]:
    """Per-sample factors that turn one token mean over ``total_tokens`` into Σ_g (mean over group g's tokens):
    ``total / tokens(g)`` for a sample of loss group g, 1 for a sample without one (Evolving-RL Eq. 6; the trainer
    multiplies in each sample's ``loss_weight`` = λ_g)."""
    tokens: dict[str, float] = {}
    for s in samples:
        if s.loss_group:
            tokens[s.loss_group] = tokens.get(s.loss_group, 0.0) + float(sum(s.loss_mask[1:]))
    return [total_tokens / tokens[s.loss_group] if s.loss_group and tokens[s.loss_group] else 1.0 for s in samples]


def mini_batches(n: int, size: int, seed: int | None) -> list[list[int]]:
    """The mini-batches of one PPO epoch over ``n`` length-sorted samples: consecutive runs of ``size``, or with
    ``seed`` a seeded permutation cut into runs of ``size`` (veRL reshuffles every epoch), each sorted back by index
    so its micro-batches still pad little. Every sample is in exactly one mini-batch either way."""
    size = max(1, size)
    order = list(range(n))
    if seed is not None and size < n:
        random.Random(seed).shuffle(order)
    return [sorted(order[i : i + size]) for i in range(0, n, size)]


def shuffle_seed(samples: Sequence[TrainingSample], epoch: int) -> int:
    """A seed from the samples themselves and the epoch: the same on every data-parallel rank (they receive the same
    samples) and after a resume (the same samples are rebuilt), without a counter that a restart would reset."""
    shape = [[len(s.token_ids), s.token_ids[-1] if s.token_ids else 0] for s in samples]
    return zlib.crc32(json.dumps(shape).encode()) * 1009 + epoch


class GRPOTrainer:
    """One config, one trainer (TRL style): ``update(samples)`` performs the policy-gradient update of Eq. 17."""

    def __init__(
        self,
        llm,
        cfg: TrainConfig,
        eps_high_boost: float | None = None,
        reference_model=None,
        entropy_coef: float = 0.0,
        parallel: DataParallel | None = None,
        engine: Engine | None = None,
    ) -> None:
        self.llm = llm
        # what rollouts generate with (default: the policy itself), given the new weights after each update
        self.engine = engine if engine is not None else seam(llm)
        self.parallel = parallel  # data-parallel ranks (train/distributed.py); None: this process does all
        self.cfg = cfg
        self.eps_high_boost = eps_high_boost
        self.entropy_coef = entropy_coef
        self.policy = Policy(llm, cfg, parallel)  # model, optimizer, master weights (train/policy.py)
        self.device = self.policy.device
        self.pad_id = self.policy.tokenizer.pad_token_id
        self.reference = reference_model if cfg.kl_beta > 0 else None
        if self.reference is not None:
            self.reference.eval()
            for p in self.reference.parameters():
                p.requires_grad_(False)
        self.amp = autocast_dtype(cfg.autocast, self.device)

    # the policy's state, as the trainer's callers and tests name it
    @property
    def model(self) -> Any:
        return self.policy.model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.policy.optimizer

    @property
    def master(self) -> MasterWeights | None:
        return self.policy.master

    @property
    def sharded(self) -> ShardedPolicy | None:
        return self.policy.sharded

    # -- batching ------------------------------------------------------------------------------------------------
    def _collate(self, samples: Sequence[TrainingSample]) -> dict[str, torch.Tensor]:
        width = max(len(s.token_ids) for s in samples)
        B = len(samples)
        ids = torch.full((B, width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((B, width), dtype=torch.long)
        mask = torch.zeros((B, width))
        adv = torch.zeros((B, width))
        for i, s in enumerate(samples):
            n = len(s.token_ids)
            ids[i, :n] = torch.tensor(s.token_ids)
            attn[i, :n] = 1
            m = torch.tensor(s.loss_mask, dtype=torch.float32) * (
                1 - torch.tensor(s.experience_mask, dtype=torch.float32)
            )
            m[0] = 0.0  # the first token has no prediction
            mask[i, :n] = m
            adv[i, :n] = torch.tensor(s.token_advantages)
        guided = torch.tensor([s.experience_guided for s in samples], dtype=torch.bool)
        weights = torch.tensor([s.loss_weight for s in samples], dtype=torch.float32)
        ent = torch.tensor([s.entropy_coef + self.entropy_coef for s in samples], dtype=torch.float32)
        return {
            "ids": ids.to(self.device),
            "attn": attn.to(self.device),
            "mask": mask.to(self.device),
            "adv": adv.to(self.device),
            "guided": guided.to(self.device),
            "weights": weights.to(self.device),
            "entropy_coef": ent.to(self.device),
        }

    @torch.no_grad()
    def _share_groups(self, samples: Sequence[TrainingSample], idx: Sequence[int]) -> list[tuple[list[int], int]]:
        """``idx`` partitioned by group into (members, shared prefix length); prefix 0 = the plain path (and
        always, with ``train.shared_prefix`` off)."""
        if not self.cfg.shared_prefix:
            return [(list(idx), 0)]
        groups = share_groups([samples[i].token_ids for i in idx], [samples[i].group_id for i in idx])
        return [([idx[j] for j in members], p) for members, p in groups]

    def _logprobs_no_grad(self, model, samples: Sequence[TrainingSample]) -> list[torch.Tensor]:
        out: list[torch.Tensor | None] = [None] * len(samples)
        size = max(1, self.cfg.micro_batch_size)
        for members, p in self._share_groups(samples, range(len(samples))):
            micros = [members[k : k + size] for k in range(0, len(members), size)]
            batches = [self._collate([samples[i] for i in micro]) for micro in micros]
            pre = None
            if p:
                start = min(first_loss_position(b["mask"]) for b in batches)
                with torch.no_grad():
                    pre = prefix_forward(model, batches[0]["ids"][0, :p], start, self.amp)
            for micro, batch in zip(micros, batches):
                with torch.no_grad():
                    if pre is None:
                        lp, _ = sequence_logprobs(
                            model, batch["ids"], batch["attn"], self.amp, start=first_loss_position(batch["mask"])
                        )
                    else:
                        lp, _ = suffix_logprobs(
                            model, pre, batch["ids"], [len(samples[i].token_ids) for i in micro], start, self.amp
                        )
                for j, i in enumerate(micro):
                    out[i] = lp[j, : len(samples[i].token_ids)].detach()
        assert all(x is not None for x in out), "every sample belongs to exactly one share group"
        return out  # type: ignore[return-value]

    def _behaviour_logprobs(self, samples: Sequence[TrainingSample]) -> dict[int, torch.Tensor]:
        """Old log-probs of experience-stripped samples, from the sequence as generated (§4.3, Eq. 17).

        A guided sample is trained as π_θ(τ | q) but was sampled from π_old(τ | q, exp). A no-grad forward of the
        current (= old: before the update) policy over the unstripped sequence, under the same numerics as the
        training forward, gives log π_old(τ | q, exp) at each kept token; the ratio then differs from 1 by the
        experience's effect alone. (The sampler's own recorded log-probs would add the inference engine's numeric
        gap to every token; that gap is logged as ``train/behaviour_logprob_gap``.)
        """
        idx = [i for i, s in enumerate(samples) if s.behaviour_token_ids is not None]
        if not idx:
            return {}
        proxies = []
        for i in idx:
            s = samples[i]
            assert s.behaviour_token_ids is not None and s.behaviour_positions is not None  # set together
            n = len(s.behaviour_token_ids)
            mask = [0] * n
            for t, pos in enumerate(s.behaviour_positions):
                if s.loss_mask[t]:
                    mask[pos] = 1
            proxies.append(
                TrainingSample(
                    trajectory_id=s.trajectory_id,
                    group_id=s.group_id,
                    token_ids=s.behaviour_token_ids,
                    loss_mask=mask,
                    token_advantages=[0.0] * n,
                    experience_mask=[0] * n,
                )
            )
        full = self._logprobs_no_grad(self.model, proxies)
        return {i: lp[torch.tensor(samples[i].behaviour_positions, device=lp.device)] for i, lp in zip(idx, full)}

    def _reference_logprobs(self, samples: Sequence[TrainingSample]) -> list[torch.Tensor] | None:
        if self.cfg.kl_beta <= 0:
            return None
        if self.reference is not None:
            return self._logprobs_no_grad(self.reference, samples)
        if self.cfg.lora:  # LoRA: the base model (the adapter switched off) is the reference
            with self.model.disable_adapter():
                return self._logprobs_no_grad(self.model, samples)
        return None

    @staticmethod
    def _behaviour_gap(
        samples: Sequence[TrainingSample], behaviour: dict[int, torch.Tensor], stats: UpdateStats
    ) -> None:
        total, n = 0.0, 0
        for i, lp in behaviour.items():
            s = samples[i]
            if s.rollout_logprobs is None:
                continue
            for t in range(1, len(s.token_ids)):
                if s.loss_mask[t]:
                    total += abs(float(lp[t]) - s.rollout_logprobs[t])
                    n += 1
        stats.behaviour_logprob_gap = total / n if n else 0.0

    # -- the update ------------------------------------------------------------------------------------------------
    def update(self, samples: Sequence[TrainingSample]) -> UpdateStats:
        """One update of Eq. 17: the log-probs every epoch compares against, then per PPO epoch and mini-batch the
        backward passes and one optimizer step, then the new weights to the engine and the statistics."""
        t0 = time.perf_counter()
        samples = [s for s in samples if any(s.loss_mask)]
        stats = UpdateStats(sequences=len(samples))
        if not samples:
            return stats
        # Sort by length so micro-batches pad little; the loss is a token mean, so order does not matter.
        samples = sorted(samples, key=lambda s: len(s.token_ids))
        anchors = self._anchors(samples, stats)
        self.model.train()
        acc = _Accumulated(stats)
        with_entropy = self.entropy_coef != 0.0 or any(s.entropy_coef != 0.0 for s in samples)
        for epoch in range(self.cfg.ppo_epochs):
            seed = shuffle_seed(samples, epoch) if self.cfg.shuffle_mini_batches else None
            for mini in mini_batches(len(samples), self.cfg.mini_batch_size or len(samples), seed):
                self.policy.zero_grad()
                idle = self._backward(samples, mini, anchors, with_entropy, acc)
                if self.sharded is not None:
                    self._idle_passes(idle, samples[mini[0]], with_entropy)
                grad_norm = self.policy.step()
                if grad_norm is None:
                    continue
                stats.optimizer_steps += 1
                stats.grad_norm = max(stats.grad_norm, grad_norm)
        self.policy.publish(self.engine)  # rollouts generate with the new weights
        self._finish_stats(samples, acc, t0)
        return stats

    def _anchors(self, samples: Sequence[TrainingSample], stats: UpdateStats) -> _Anchors:
        """The log-probs the loss compares against, from no-grad passes before any step: old (Eq. 17's π_old), the
        behaviour policy of experience-guided samples (§4.3), and the reference (KL term)."""
        self.model.eval()
        # One optimizer step over the whole batch is on-policy: the old log-probs are the current ones, taken from
        # the same forward pass (detached) instead of a separate one. Otherwise they are computed up front.
        single_step = self.cfg.ppo_epochs == 1 and (
            not self.cfg.mini_batch_size or self.cfg.mini_batch_size >= len(samples)
        )
        old = None if single_step else self._logprobs_no_grad(self.model, samples)
        behaviour = self._behaviour_logprobs(samples)  # guided samples: π_old(τ | q, exp), always a separate pass
        if old is not None:
            for i, lp in behaviour.items():
                old[i] = lp
        self._behaviour_gap(samples, behaviour, stats)
        return _Anchors(old, behaviour, self._reference_logprobs(samples))

    def _backward(
        self,
        samples: Sequence[TrainingSample],
        mini: list[int],
        a: _Anchors,
        with_entropy: bool,
        acc: _Accumulated,
    ) -> int:
        """Forward and backward over one mini-batch (this rank's share of it): per share group, its micro-batches
        collated, their log-probs (plain, or the shared prefix once), the loss of Eq. 17 with the token count of the
        whole mini-batch as denominator. Returns the idle passes FSDP2 needs to match the busiest rank."""
        mini_tokens = sum(float(sum(samples[i].loss_mask[1:])) for i in mini) or 1.0
        scale = group_scales([samples[i] for i in mini], mini_tokens)
        weighted = any(s.loss_weight != 1.0 or s.loss_group for s in samples)
        where = {i: pos for pos, i in enumerate(mini)}

        def micro_loss(micro: list[int], batch: dict, logp: torch.Tensor, ent: torch.Tensor | None) -> torch.Tensor:
            width = batch["ids"].shape[1]
            old_lp = torch.zeros_like(batch["adv"])
            ref_lp = torch.zeros_like(batch["adv"]) if a.ref is not None else None
            for j, i in enumerate(micro):
                n = len(samples[i].token_ids)
                if a.old is not None:
                    old_lp[j, :n] = a.old[i]
                if ref_lp is not None and a.ref is not None:
                    ref_lp[j, :n] = a.ref[i]
            if a.old is None:
                old_lp = logp.detach().clone()
                for j, i in enumerate(micro):
                    if i in a.behaviour:
                        old_lp[j, : len(samples[i].token_ids)] = a.behaviour[i]
            clip: dict[str, Any] = {
                "eps_low": self.cfg.eps_low,
                "eps_high": self.cfg.eps_high,
                "eps_high_boost": self.eps_high_boost,
            }
            given = (old_lp, batch["adv"], batch["mask"], batch["guided"])
            for k, v in ratio_diagnostics(logp[:, :width].detach(), *given, **clip).items():
                acc.diag[k] = acc.diag.get(k, 0.0) + v
            weights = (
                batch["weights"] * torch.tensor([scale[where[i]] for i in micro], device=self.device)
                if weighted
                else None
            )
            loss, st = policy_loss(
                logp[:, :width],
                *given,
                **clip,
                ref_logprobs=ref_lp,
                kl_beta=self.cfg.kl_beta,
                entropy=ent,
                entropy_coef=batch["entropy_coef"],
                denominator=mini_tokens,
                weights=weights,
                log_ratio_clamp=self.cfg.log_ratio_clamp,
                dual_clip_c=self.cfg.dual_clip_c,
            )
            w = float(batch["mask"].sum())
            acc.weight_total += w
            for k, v in st.items():
                acc.agg[k] = acc.agg.get(k, 0.0) + v * w
            acc.agg["loss"] = acc.agg.get("loss", 0.0) + float(loss.detach()) * mini_tokens
            return loss

        groups = self._share_groups(samples, mini)
        if self.sharded is not None:  # FSDP2: plain passes only, the same number on every rank
            groups = [(members, 0) for members, _ in groups]
        if self.parallel is not None:  # this rank's share; gradients are summed below
            groups = self.parallel.shard(groups)
        idle = 0
        if self.sharded is not None and self.parallel is not None:  # agreed before any collective runs
            mbs = max(1, self.cfg.micro_batch_size)
            passes = sum(-(-len(members) // mbs) for members, _ in groups)
            idle = self.parallel.max_int(passes) - passes
        for members, p in groups:
            micros = [
                members[k : k + max(1, self.cfg.micro_batch_size)]
                for k in range(0, len(members), max(1, self.cfg.micro_batch_size))
            ]
            batches = [self._collate([samples[i] for i in micro]) for micro in micros]
            if p == 0:  # the plain path: each micro-batch forward and backward over whole sequences
                for micro, batch in zip(micros, batches):
                    logp, ent = sequence_logprobs(
                        self.model,
                        batch["ids"],
                        batch["attn"],
                        self.amp,
                        with_entropy,
                        start=first_loss_position(batch["mask"]),
                    )
                    loss = micro_loss(micro, batch, logp, ent)
                    (loss * self.policy.loss_scale).backward()
                    acc.stats.tokens += int(batch["attn"].sum())
                continue
            start = min(first_loss_position(b["mask"]) for b in batches)
            step = SharedPrefixStep(self.model, batches[0]["ids"][0, :p], start, self.amp)
            step.run(
                [(b["ids"], [len(samples[i].token_ids) for i in micro]) for micro, b in zip(micros, batches)],
                with_entropy,
                lambda m, logp, ent: micro_loss(micros[m], batches[m], logp, ent),
            )
            acc.stats.tokens += p + sum(int(b["attn"].sum()) - p * b["ids"].shape[0] for b in batches)
            acc.stats.shared_prefix_tokens += p * (len(members) - 1)
        return idle

    def _finish_stats(self, samples: Sequence[TrainingSample], acc: _Accumulated, t0: float) -> None:
        """Every rank's share of the statistics summed, then token-weighted means and shares."""
        stats, agg, diag, weight_total = acc.stats, acc.agg, acc.diag, acc.weight_total
        if self.parallel is not None:  # every rank's share of the statistics
            summed = self.parallel.sum_values(
                {
                    **{f"agg/{k}": v for k, v in agg.items()},
                    **{f"diag/{k}": v for k, v in diag.items()},
                    "weight_total": weight_total,
                    "tokens": float(stats.tokens),
                    "shared_prefix_tokens": float(stats.shared_prefix_tokens),
                }
            )
            agg = {k[4:]: v for k, v in summed.items() if k.startswith("agg/")}
            diag = {k[5:]: v for k, v in summed.items() if k.startswith("diag/")}
            weight_total = summed["weight_total"]
            stats.tokens, stats.shared_prefix_tokens = int(summed["tokens"]), int(summed["shared_prefix_tokens"])
        if weight_total:
            for k, v in agg.items():
                if k in _STAT_FIELDS:
                    setattr(stats, k, v / weight_total)
        for name in ("guided", "vanilla"):
            n = diag.get(f"{name}_tokens", 0.0)
            setattr(stats, f"{name}_clip_frac", diag.get(f"{name}_clipped", 0.0) / n if n else 0.0)
            setattr(stats, f"{name}_ratio_dev", diag.get(f"{name}_ratio_dev", 0.0) / n if n else 0.0)
        g = diag.get("guided_tokens", 0.0)
        stats.guided_tokens = int(g / max(1, self.cfg.ppo_epochs))
        stats.boost_changed_share = diag.get("boost_changed", 0.0) / g if g else 0.0
        stats.policy_tokens = int(sum(sum(s.loss_mask[1:]) for s in samples))
        stats.seconds = time.perf_counter() - t0
        stats.tokens_per_s = stats.tokens / stats.seconds if stats.seconds else 0.0

    def _idle_passes(self, n: int, sample: TrainingSample, with_entropy: bool) -> None:
        """FSDP2: ``n`` zero-weighted forward/backward passes, so this rank joins the collectives of ranks with more
        micro-batches (its gradients are unchanged)."""
        batch = self._collate([sample])
        for _ in range(n):
            logp, _ = sequence_logprobs(self.model, batch["ids"], batch["attn"], self.amp, with_entropy)
            (logp.sum() * 0.0).backward()

    # -- checkpoints -----------------------------------------------------------------------------------------------
    def save(self, path: Path, with_optimizer: bool = True) -> Path:
        """Write a checkpoint folder that ``LocalLLM`` / ``evolvekit eval --policy`` load (``Policy.save``)."""
        return self.policy.save(path, with_optimizer)

    def load_optimizer(self, path: Path) -> bool:
        return self.policy.load_optimizer(path)
