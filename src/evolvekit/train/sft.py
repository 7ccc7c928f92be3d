"""Cold start (EvolveR §3.2.2 and A.2): a short supervised warm-up before RL.

The pairs are (task -> reference solution) of tasks self-questioning produced *and verified* (their reference
replayed in the environment), never held-out evaluation tasks. The prompt is exactly what a rollout shows the
policy (system prompt with tools, worked examples, the task), and the target is the reference's first turn as an
episode: the tool calls in the documented action format and their end of turn, then (after the replayed tool
result, not a target) a closing message and its end of turn. So the warm-up teaches the format of a call *and* that
a turn ends once its calls ran; trained on the calls alone, the 135M policy learned to call again after every
result (held-out avg@8 0.28 -> 0.09 on the arith family).
Loss: token-mean negative log-likelihood of the target tokens; AdamW with linear warm-up then linear decay.

Every pair's prompt starts with the same system prompt, tools and worked examples, so with ``train.shared_prefix``
on (the default) an optimizer batch's longest common token prefix runs forward and backward once
(train/shared_prefix.py): the same loss and gradients as the plain pass, up to float summation order
(tests/cpu/test_cold_start.py).
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from evolvekit.agent.rollout import initial_context
from evolvekit.agent.templates import TemplateSettings
from evolvekit.config import ColdStartConfig
from evolvekit.env.action_text import format_call
from evolvekit.env.base import Action, Environment
from evolvekit.train.rewards import SEARCH_TOOL
from evolvekit.train.shared_prefix import SharedPrefixStep, share_groups
from evolvekit.train.trainer import first_loss_position, sequence_logprobs
from evolvekit.types import Task, ToolCall, TrainingSample

log = logging.getLogger(__name__)


@dataclass
class SFTStats:
    examples: int = 0
    steps: int = 0
    epochs: int = 0
    losses: list[float] = field(default_factory=list)  # per optimizer step
    seconds: float = 0.0
    tokens: int = 0  # tokens forwarded (a shared prefix counts once)
    shared_prefix_tokens: int = 0  # tokens not forwarded again thanks to the shared prefix

    def as_metrics(self) -> dict[str, float]:
        out = {
            "cold_start/examples": float(self.examples),
            "cold_start/steps": float(self.steps),
            "cold_start/seconds": self.seconds,
            "cold_start/tokens": float(self.tokens),
            "cold_start/shared_prefix_tokens": float(self.shared_prefix_tokens),
        }
        if self.losses:
            out.update({"cold_start/loss_first": self.losses[0], "cold_start/loss_last": self.losses[-1]})
        return out


def reference_pairs(
    tasks: Sequence[Task],
    make_env: Callable[[], Environment],
    llm,
    rendering: str,
    template: TemplateSettings,
    limit: int,
    closing: str = "Done.",
    search: Callable[[str], str] | None = None,
) -> list[TrainingSample]:
    """One sample per task with a reference solution: its first turn as the rollout would see it.

    Tokens: rollout prompt (mask 0) + reference calls and end of turn (mask 1) + the replayed tool result (mask 0)
    + ``closing`` and end of turn (mask 1). Where the chat template does not reproduce the call tokens verbatim
    (or ``closing`` is empty), the sample is the prompt and the calls alone.

    With ``search`` (EvolveR's retrieval-as-action), the episode first calls ``search_experience`` with the task's
    text; ``search(query)`` gives the tool's answer, shown as an observation (mask 0) before the reference calls.
    """
    out: list[TrainingSample] = []
    for task in tasks:
        if len(out) >= limit:
            break
        if not task.reference_solution or not task.reference_solution[0]:
            continue
        calls = list(task.reference_solution[0])
        call_text = "".join(format_call(c) for c in calls)
        env = make_env()
        try:
            reset = env.reset(task)
            ctx = initial_context(reset, rendering, template)
            prompt, _ = ctx.tokenize(llm)
            observation = env.step(Action(tool_calls=calls)).observation if closing else ""
        finally:
            env.close()
        actions = [(call_text, observation)]
        if search is not None:
            query = task.turns[0]
            actions.insert(0, (format_call(ToolCall(name=SEARCH_TOOL, arguments={"query": query})), search(query)))
        ids, mask = list(prompt), [0] * len(prompt)
        if closing:
            built = _episode_tokens(ctx, llm, ids, mask, actions, closing)
            if built is None:
                log.warning(
                    "cold start: the chat template does not reproduce the call tokens of %s; calls only", task.task_id
                )
            else:
                ids, mask = built
        if len(ids) == len(prompt):  # calls only: the first action's tokens, without its end of turn
            first = llm.encode(actions[0][0])
            ids, mask = ids + first, mask + [1] * len(first)
        out.append(
            TrainingSample(
                trajectory_id=task.task_id,
                group_id=task.task_id,
                token_ids=ids,
                loss_mask=mask,
                token_advantages=[0.0] * len(ids),
                experience_mask=[0] * len(ids),
            )
        )
    return out


def _episode_tokens(
    ctx, llm, ids: list[int], mask: list[int], actions: Sequence[tuple[str, str]], closing: str
) -> tuple[list[int], list[int]] | None:
    """Prompt + each (assistant action, observation) + ``closing``: actions and their end-of-turn tokens are targets
    (mask 1), observations are not. None where the chat template does not reproduce an action's tokens verbatim."""
    end = None
    for text, observation in actions:
        action_ids = llm.encode(text)
        n = len(ids) + len(action_ids)
        ctx.add_assistant(text)
        ctx.add_observation(observation)
        after, _ = ctx.tokenize(llm)
        if after[:n] != ids + action_ids or len(after) <= n:
            return None
        end = after[n]  # the template's end-of-turn token after an assistant message
        mask = mask + [1] * len(action_ids) + [1] + [0] * (len(after) - n - 1)
        ids = list(after)
    tail = llm.encode(closing) + [end]
    return ids + tail, mask + [1] * len(tail)


def lr_factor(step: int, total: int, warmup_ratio: float) -> float:
    """Linear warm-up over the first ``warmup_ratio`` of the steps, then linear decay to 0."""
    warm = max(1, round(total * warmup_ratio))
    if step < warm:
        return (step + 1) / warm
    return max(0.0, (total - step) / max(1, total - warm))


def sft_warmup(trainer, samples: Sequence[TrainingSample], cfg: ColdStartConfig, seed: int = 0) -> SFTStats:
    """Fine-tune ``trainer``'s policy (full or LoRA, as configured for RL) on ``samples``; its own optimizer."""
    stats = SFTStats(examples=len(samples))
    if not samples:
        return stats
    t0 = time.perf_counter()
    model = trainer.model
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.learning_rate)
    per_epoch = (len(samples) + cfg.batch_size - 1) // cfg.batch_size
    total = per_epoch * cfg.epochs
    rng = random.Random(seed)
    order = list(range(len(samples)))
    model.train()
    for epoch in range(cfg.epochs):
        rng.shuffle(order)
        for b in range(per_epoch):
            idx = order[b * cfg.batch_size : (b + 1) * cfg.batch_size]
            for g in opt.param_groups:
                g["lr"] = cfg.learning_rate * lr_factor(stats.steps, total, cfg.warmup_ratio)
            opt.zero_grad(set_to_none=True)
            stats.losses.append(batch_backward(trainer, [samples[i] for i in idx], stats))
            torch.nn.utils.clip_grad_norm_(params, trainer.cfg.max_grad_norm)
            opt.step()
            stats.steps += 1
        stats.epochs += 1
        log.info("cold start epoch %d/%d: loss %.4f", epoch + 1, cfg.epochs, stats.losses[-1])
    model.eval()
    trainer.llm.reset_prefix_cache()
    stats.seconds = round(time.perf_counter() - t0, 1)
    return stats


def batch_backward(trainer, batch: Sequence[TrainingSample], stats: SFTStats) -> float:
    """Accumulate the gradient of one optimizer batch's loss (token-mean NLL over the whole batch's target tokens),
    in micro-batches; with ``train.shared_prefix`` the batch's common prefix runs once. Returns the loss."""
    model = trainer.model
    n_tokens = sum(sum(s.loss_mask) for s in batch)
    micro = max(1, trainer.cfg.micro_batch_size)
    p = 0
    if trainer.cfg.shared_prefix and trainer.sharded is None and len(batch) > 1:
        [(_, p)] = share_groups([s.token_ids for s in batch], ["batch"] * len(batch))
    micros = [batch[m : m + micro] for m in range(0, len(batch), micro)]
    collated = [trainer._collate(list(mb)) for mb in micros]
    total = 0.0

    def loss_of(m: int, lp: torch.Tensor) -> torch.Tensor:
        nonlocal total
        loss = -(lp * collated[m]["mask"]).sum() / n_tokens
        total += float(loss.detach())
        return loss

    if p == 0:
        for m, b in enumerate(collated):
            lp, _ = sequence_logprobs(model, b["ids"], b["attn"], trainer.amp, start=first_loss_position(b["mask"]))
            loss_of(m, lp).backward()
            stats.tokens += int(b["attn"].sum())
        return total
    start = min(first_loss_position(b["mask"]) for b in collated)
    step = SharedPrefixStep(model, collated[0]["ids"][0, :p], start, trainer.amp)
    step.run(
        [(b["ids"], [len(s.token_ids) for s in mb]) for mb, b in zip(micros, collated)],
        False,
        lambda m, lp, _ent: loss_of(m, lp),
    )
    stats.tokens += p + sum(int(b["attn"].sum()) - p * b["ids"].shape[0] for b in collated)
    stats.shared_prefix_tokens += p * (len(batch) - 1)
    return total
