"""Reward shaping (EvolveR §3.3): R = w_o·R_outcome + w_f·R_format, with R_format as execution-checked credit.

R_format for tool-calling environments, per step that tried to act: a call that executed (known tool, valid
argument names and types) earns 1, a call to a known tool with invalid arguments 0.5, an unknown tool 0, and an
unparseable action 0; steps that answer in plain text (ending the turn) are not scored. R_format is the mean over
scored steps (0 when none). Paper defaults w_o = 1.0, w_f = 0.1; off (w_f = 0) in the paper-faithful configs.
The format part is logged separately (``reward/format``) so nobody mistakes format for success.
"""

from __future__ import annotations

from typing import Sequence

from evolvekit.agent.calls import call_key
from evolvekit.types import RewardParts, ToolCall, Trajectory

SEARCH_TOOL = "search_experience"  # navigating/tool_env.py's action (EvolveR §3.2.2)


def call_credit(ok: bool, unknown_tool: bool) -> float:
    if ok:
        return 1.0
    return 0.0 if unknown_tool else 0.5


def format_reward(traj: Trajectory) -> float:
    scores = []
    for step in traj.steps:
        if step.parse_error is not None and not step.tool_calls:
            scores.append(0.0)
            continue
        if step.calls:
            scores.append(sum(call_credit(c.ok, c.unknown_tool) for c in step.calls) / len(step.calls))
    return sum(scores) / len(scores) if scores else 0.0


def search_score(n_search: int, used_environment_tools: bool) -> float:
    """EvolveR A.2's R_search, adapted: the diversity score is 0.5 when the episode used both kinds of search its
    environment offers — experience (``search_experience``) and the environment's own tools (its "knowledge") — and
    0.2 for experience alone (0 without a search); plus 0.1 for each search beyond the first, at most 0.5."""
    if n_search <= 0:
        return 0.0
    return (0.5 if used_environment_tools else 0.2) + min(0.5, 0.1 * (n_search - 1))


def evolver_format_reward(traj: Trajectory) -> float:
    """EvolveR Eq. 4, adapted to tool calling: R_format = 𝟙(τ complete) · (R_act + R_search) / 2.

    ``R_act`` stands in for R_think (the paper scores its <think> actions; here the actions are tool calls): the
    execution-checked call credit of :func:`format_reward`. ``R_search`` is :func:`search_score`. τ is complete
    when the episode ended by itself (not truncated at the step limit, not failed). An episode that never searched
    gets at most half the format reward: the search action is what this reward teaches."""
    if traj.flags.truncated or traj.flags.failed or not traj.steps:
        return 0.0
    names = [c.name for s in traj.steps for c in s.tool_calls]
    n_search = names.count(SEARCH_TOOL)
    return (format_reward(traj) + search_score(n_search, any(n != SEARCH_TOOL for n in names))) / 2


FORMAT_REWARDS = {"calls": format_reward, "evolver": evolver_format_reward}

THINK_WORDS = (5, 150)  # a thought shorter than this says nothing; longer rambles (EvolveR caps excessive thinking)


def reasoning_reward(traj: Trajectory) -> float:
    """The reasoning reward of the reasoning-augmented template (AgentEvolver §6.2.1: "additional rewards promoting
    high-quality reasoning"; the paper gives no formula). Per step: 1 for a well-formed ``<think>…</think>`` before
    the action with 5–150 words, 0.5 well-formed but shorter or longer, 0 otherwise; the mean over steps."""
    scores = []
    for step in traj.steps:
        if step.format_ok is None:  # a step not written under the reasoning template
            continue
        words = step.think_words or 0
        scores.append(0.0 if not step.format_ok else 1.0 if THINK_WORDS[0] <= words <= THINK_WORDS[1] else 0.5)
    return sum(scores) / len(scores) if scores else 0.0


def partial_credit(traj: Trajectory, reference: Sequence[Sequence[ToolCall]]) -> float:
    """The share of the reference's calls that the episode executed without error (normalised call identity,
    agent/calls.py; each reference call matched at most once, in any turn). evolvekit's own shaping, not in the
    papers: a dense reward written from a reference. On a person-written task that reference is gold, so the run
    reads it only under ``run.oracle`` (the information-matched control for what gold buys); 0 without a reference."""
    todo = [call_key(c) for turn in reference for c in turn]
    if not todo:
        return 0.0
    total = len(todo)
    for step in traj.steps:
        oks = [c.ok for c in step.calls] if len(step.calls) == len(step.tool_calls) else [True] * len(step.tool_calls)
        for call, ok in zip(step.tool_calls, oks):
            key = call_key(call)
            if ok and key in todo:
                todo.remove(key)
    return (total - len(todo)) / total


def mix_reward(mode: str, state: float | None, judge: float | None, judge_weight: float) -> float:
    """The synthetic-task reward: 'state', 'judge' or 'mix' = w·judge + (1 − w)·state (missing parts fall back)."""
    if mode == "state" or judge is None:
        return float(state or 0.0)
    if mode == "judge" or state is None:
        return judge
    return judge_weight * judge + (1.0 - judge_weight) * state


def outcome_part(
    parts: RewardParts, fallback: float, synthetic_mode: str = "state", judge_weight: float = 0.5
) -> float:
    """R_out, before shaping, from the record's parts: an Evolving-RL extractor's skill utility; a synthesized task's
    state check mixed with its judge score (``mix_reward``); else the environment's check (``fallback`` where the
    record has none: a trajectory made outside a rollout)."""
    if parts.skill_utility is not None:
        return parts.skill_utility
    if parts.state_score is not None:
        return mix_reward(synthetic_mode, parts.state_score, parts.judge_score, judge_weight)
    return parts.env if parts.env is not None else fallback


def shape_rewards(
    trajectories: Sequence[Trajectory],
    w_outcome: float,
    w_format: float,
    kind: str = "calls",
    w_reasoning: float = 0.0,
    w_partial: float = 0.0,
    references: dict[str, list[list[ToolCall]] | None] | None = None,
    synthetic_mode: str = "state",
    judge_weight: float = 0.5,
) -> dict[str, float]:
    """Each training trajectory's reward, computed once from its record: R = w_o·R_out + w_f·R_format
    (+ w_r·R_reasoning) (+ w_p·R_partial), R_out by ``outcome_part`` (``synthetic_mode`` and ``judge_weight``:
    ``questioning.reward`` resolved and ``questioning.judge_weight``). Sets ``Trajectory.outcome_reward`` and a new
    ``Trajectory.rewards`` record with the parts (R_partial in ``metadata['partial_credit']``); the only writer of
    ``outcome_reward`` after the rollout.

    ``kind``: ``calls`` (execution-checked call credit) or ``evolver`` (EvolveR Eq. 4 with the search action).
    ``references``: per task id, the reference the run may read (src/evolvekit/boundary.py), for ``partial_credit``.
    Returns metrics (none when no shaping weight departs from R = R_out)."""
    shaping = not (w_outcome == 1.0 and w_format == 0.0 and w_reasoning == 0.0 and w_partial == 0.0)
    fmt_fn = FORMAT_REWARDS[kind]
    fmt, out = [], []
    for t in trajectories:
        if t.flags.failed:
            continue
        r_out = outcome_part(t.rewards, float(t.outcome_reward or 0.0), synthetic_mode, judge_weight)
        if not shaping:
            t.outcome_reward = r_out
            continue
        r_fmt = fmt_fn(t)
        update: dict[str, float] = {"outcome": r_out, "format": r_fmt}
        total = w_outcome * r_out + w_format * r_fmt
        if w_reasoning:
            r_reason = reasoning_reward(t)
            update["reasoning"] = r_reason
            total += w_reasoning * r_reason
        if w_partial:
            ref = (references or {}).get(t.task_id)
            r_part = partial_credit(t, ref) if ref else 0.0
            t.metadata = {**t.metadata, "partial_credit": r_part}
            total += w_partial * r_part
        t.rewards = t.rewards.model_copy(update=update)
        t.outcome_reward = total
        fmt.append(r_fmt)
        out.append(r_out)
    if not shaping:
        return {}
    n = len(fmt) or 1
    return {"reward/format": sum(fmt) / n, "reward/outcome": sum(out) / n}
