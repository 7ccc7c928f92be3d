"""The step-wise attribution prompts (AgentEvolver §5.1, Figures 8 and 9) and a robust parser of the answer."""

from __future__ import annotations

import re
from dataclasses import dataclass

from evolvekit.types import StepLabel, Task, Trajectory

SYSTEM_PROMPT = """You are an expert process reward evaluator specializing in attributional analysis.

INPUTS: A user's TASK, a numbered SOLUTION TRAJECTORY of steps, and a final OVERALL PERFORMANCE SCORE.

YOUR TASK: Attribute the contribution of each step in the trajectory to the final score based on the following rules.

# EVALUATION RULES:
- If Score is POSITIVE (> 0):
  - GOOD: The step contributed positively to the solution.
  - BAD: The step was irrelevant, neutral, or detrimental.
- If Score is NEGATIVE (<= 0):
  - GOOD: The step only if it actively corrected or mitigated an error.
  - BAD: The step introduced, propagated, or failed to fix an error.

FOCUS: Evaluate strictly on the technical impact of each step's action. Ignore superficial elements like politeness. Reply in the required format only."""  # noqa: E501  (the paper's prompt, verbatim)

MAX_FIELD_CHARS = 1500  # long observations are cut so one trajectory fits the attributor's context


def _clip(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    return text if len(text) <= limit else text[: limit // 2] + "\n[...]\n" + text[-limit // 2 :]


def user_prompt(task: Task | None, trajectory: Trajectory, score: float) -> str:
    """Figure 9: task, numbered steps with action and observation, overall score, required output format."""
    query = "\n".join(task.turns) if task is not None else f"(task {trajectory.task_id})"
    n = len(trajectory.steps)
    parts = ["# TASK DESCRIPTION", query, "", f"# SOLUTION TRAJECTORY (total {n} steps)"]
    for i, step in enumerate(trajectory.steps):
        parts += [
            f">>> EVAL-STEP {i} <<<",
            f"<ACTION> {_clip(step.action_text)} <END>",
            f"<OBSERVATION> {_clip(step.observation)} <END>",
            "",
        ]
    parts += [f"OVERALL PERFORMANCE SCORE {score:g}", "", "# REQUIRED OUTPUT FORMAT:"]
    for i in range(n):
        parts += [f"Step {i} Analysis: <your reasoning>", f"Step {i} Judgment: GOOD/BAD"]
    return "\n".join(parts)


_JUDGMENT = re.compile(
    r"step\W{0,3}(\d+)\W{0,3}(?:judg(?:e)?ment|label|verdict)?\s*[:：=\-]*\s*[*_`\"'\[(]*\s*(good|bad)\b", re.IGNORECASE
)


@dataclass(frozen=True)
class ParsedAttribution:
    labels: list[StepLabel] | None  # one per step, or None when the answer cannot be used
    problem: str | None = None


def parse_attribution(text: str, num_steps: int) -> ParsedAttribution:
    """Read one GOOD/BAD judgment per step from free-form model output.

    Tolerates any casing, markdown around the answer, prose before and after, and "Step k: GOOD" without the
    word Judgment. A step judged more than once takes its *last* judgment (models revise themselves). Judgments
    of steps that do not exist are ignored. If any step has no judgment the answer is unusable (retried, then
    the trajectory's attribution channel is neutralised by the caller).
    """
    found: dict[int, StepLabel] = {}
    for m in _JUDGMENT.finditer(text or ""):
        k = int(m.group(1))
        if 0 <= k < num_steps:
            found[k] = StepLabel.GOOD if m.group(2).lower() == "good" else StepLabel.BAD
    missing = [k for k in range(num_steps) if k not in found]
    if missing:
        return ParsedAttribution(None, f"no judgment for step(s) {missing[:10]}")
    return ParsedAttribution([found[k] for k in range(num_steps)])
