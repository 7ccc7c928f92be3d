"""Stage D, first half: trajectories → training samples (token ids, loss mask, token advantages).

A trajectory's steps keep the exact prompt and completion ids of every generation, so the snapshot merge
(§6.2) is replayed here to get the training sequences. Experience spans are removed by their recorded token
ranges before the update (§4.3), never by pattern matching on text.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Sequence

from evolvekit.agent.context import MergedSequence, SnapshotRecorder
from evolvekit.train.losses import broadcast_to_tokens, group_advantages
from evolvekit.types import SpanKind, TrainingSample, Trajectory

log = logging.getLogger(__name__)


def merge_trajectory(traj: Trajectory) -> list[MergedSequence]:
    """Rebuild the merged token sequences of a trajectory from its per-step snapshots."""
    rec = SnapshotRecorder()
    for step in traj.steps:
        if step.completion_token_ids:
            rec.record(
                step.index, step.prompt_token_ids, step.completion_token_ids, step.completion_logprobs, spans=step.spans
            )
    return rec.merge()


def strip_spans(seq: MergedSequence, kinds: frozenset[SpanKind] = frozenset({SpanKind.EXPERIENCE})) -> MergedSequence:
    """Remove the tokens of the given span kinds (§4.3) and shift every other span and step range accordingly."""
    drop = [False] * len(seq.token_ids)
    for span in seq.spans:
        if span.kind in kinds:
            for t in range(span.start, span.end):
                drop[t] = True
    if not any(drop):
        return seq
    new_index, n = [], 0
    for d in drop:
        new_index.append(n)
        n += 0 if d else 1
    new_index.append(n)
    keep = [i for i, d in enumerate(drop) if not d]
    out = MergedSequence(
        token_ids=[seq.token_ids[i] for i in keep],
        loss_mask=[seq.loss_mask[i] for i in keep],
        logprobs=[seq.logprobs[i] for i in keep],
    )
    out.unstripped_ids, out.kept_positions = list(seq.token_ids), keep
    out.step_spans = {k: (new_index[a], new_index[b]) for k, (a, b) in seq.step_spans.items()}
    out.spans = [
        s.model_copy(update={"start": new_index[s.start], "end": new_index[s.end]})
        for s in seq.spans
        if s.kind not in kinds and new_index[s.end] > new_index[s.start]
    ]
    return out


def experience_mask(seq: MergedSequence) -> list[int]:
    mask = [0] * len(seq.token_ids)
    for span in seq.spans:
        if span.kind == SpanKind.EXPERIENCE:
            for t in range(span.start, span.end):
                mask[t] = 1
    return mask


@dataclass
class SampleStats:
    trajectories: int = 0
    skipped_failed: int = 0
    skipped_too_long: int = 0
    degenerate_groups: int = 0
    groups: int = 0
    samples: int = 0
    extra: dict[str, float] = field(default_factory=dict)


def trajectory_reward(traj: Trajectory) -> float:
    return float(traj.outcome_reward or 0.0)


def grpo_step_advantages(
    trajectories: Sequence[Trajectory],
    eps_norm: float = 1e-6,
    reward_fn: Callable[[Trajectory], float] = trajectory_reward,
) -> list[dict[int, float]]:
    """Plain GRPO: one Eq. 16 advantage per trajectory, the same for all its steps."""
    adv = group_advantages(
        [reward_fn(t) for t in trajectories], [t.group_id or t.trajectory_id for t in trajectories], eps_norm
    )
    return [{s.index: a for s in t.steps} for t, a in zip(trajectories, adv)]


def build_samples(
    trajectories: Sequence[Trajectory],
    step_advantages: Sequence[dict[int, float]],
    strip_experience: bool = True,
    max_tokens: int | None = None,
    advantage_scale: Callable[[Trajectory], float] | None = None,
) -> tuple[list[TrainingSample], SampleStats]:
    """Turn trajectories with per-step advantages into training samples (token advantages broadcast per step)."""
    stats = SampleStats(trajectories=len(trajectories))
    samples: list[TrainingSample] = []
    for traj, adv in zip(trajectories, step_advantages):
        if traj.flags.failed:
            stats.skipped_failed += 1  # an infrastructure failure says nothing about the policy
            continue
        scale = advantage_scale(traj) if advantage_scale else 1.0
        for seq in merge_trajectory(traj):
            exp_mask = experience_mask(seq)
            if strip_experience:
                seq = strip_spans(seq)
                exp_mask = [0] * len(seq.token_ids)
            if max_tokens is not None and len(seq.token_ids) > max_tokens:
                stats.skipped_too_long += 1
                continue
            tok_adv = broadcast_to_tokens({k: v * scale for k, v in adv.items()}, seq.step_spans, len(seq.token_ids))
            stripped = seq.unstripped_ids is not None
            samples.append(
                TrainingSample(
                    trajectory_id=traj.trajectory_id,
                    group_id=traj.group_id or traj.trajectory_id,
                    token_ids=seq.token_ids,
                    loss_mask=seq.loss_mask,
                    token_advantages=tok_adv,
                    experience_mask=exp_mask,
                    experience_guided=traj.flags.experience_guided,
                    # §4.3: trained without the experience, but generated with it: the behaviour policy of Eq. 17's
                    # ratio is π_old(τ | q, exp), so the trainer takes the old log-probs from the sequence as generated
                    behaviour_token_ids=seq.unstripped_ids,  # both None when nothing was stripped
                    behaviour_positions=seq.kept_positions,
                    rollout_logprobs=list(seq.logprobs) if stripped else None,
                )
            )
        samples += decision_samples(traj, {k: v * scale for k, v in adv.items()}, max_tokens, stats)
    stats.samples = len(samples)
    return samples, stats


def decision_samples(
    traj: Trajectory, adv: dict[int, float], max_tokens: int | None, stats: SampleStats
) -> list[TrainingSample]:
    """The policy's own context-management decisions (self-managing template, §6.2.1) as samples: the decision's
    tokens carry the advantage of the step it preceded (the last step's when it came after every step)."""
    out = []
    for d in traj.context_decisions:
        n_prompt, n = len(d.prompt_token_ids), len(d.prompt_token_ids) + len(d.completion_token_ids)
        if not d.completion_token_ids or (max_tokens is not None and n > max_tokens):
            stats.skipped_too_long += bool(d.completion_token_ids)
            continue
        steps = sorted(adv)
        value = adv.get(d.before_step, adv[steps[-1]] if steps else 0.0)
        out.append(
            TrainingSample(
                trajectory_id=traj.trajectory_id,
                group_id=traj.group_id or traj.trajectory_id,
                token_ids=[*d.prompt_token_ids, *d.completion_token_ids],
                loss_mask=[0] * n_prompt + [1] * (n - n_prompt),
                token_advantages=[0.0] * n_prompt + [value] * (n - n_prompt),
                experience_mask=[0] * n,
            )
        )
    return out
