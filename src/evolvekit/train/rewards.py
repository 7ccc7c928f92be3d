"""Reward shaping (EvolveR §3.3): R = w_o·R_outcome + w_f·R_format, with R_format as execution-checked credit.

R_format for tool-calling environments, per step that tried to act: a call that executed (known tool, valid
argument names and types) earns 1, a call to a known tool with invalid arguments 0.5, an unknown tool 0, and an
unparseable action 0; steps that answer in plain text (ending the turn) are not scored. R_format is the mean over
scored steps (0 when none). Paper defaults w_o = 1.0, w_f = 0.1; off (w_f = 0) in the paper-faithful configs.
The format part is logged separately (``reward/format``) so nobody mistakes format for success.
"""

from __future__ import annotations

from typing import Sequence

from evolvekit.types import Trajectory


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
        calls = step.info.get("calls") or []
        if calls:
            scores.append(sum(call_credit(c["ok"], c["unknown_tool"]) for c in calls) / len(calls))
    return sum(scores) / len(scores) if scores else 0.0


def shape_rewards(trajectories: Sequence[Trajectory], w_outcome: float, w_format: float) -> dict[str, float]:
    """Apply R = w_o·R_out + w_f·R_format in place (outcome kept in ``outcome_details``); returns metrics."""
    if w_outcome == 1.0 and w_format == 0.0:
        return {}
    fmt, out = [], []
    for t in trajectories:
        if t.flags.failed:
            continue
        r_out = float(t.outcome_reward or 0.0)
        r_fmt = format_reward(t)
        t.outcome_details = {**t.outcome_details, "outcome": r_out, "format": r_fmt}
        t.outcome_reward = w_outcome * r_out + w_format * r_fmt
        fmt.append(r_fmt)
        out.append(r_out)
    n = len(fmt) or 1
    return {"reward/format": sum(fmt) / n, "reward/outcome": sum(out) / n}
