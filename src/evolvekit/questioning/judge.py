"""The reference-based LLM judge for synthetic tasks (AgentEvolver §3.4), and the reward mix.

Two principles: (i) a relevance and repetition check — steps unrelated to the task, hallucinated or redundant
steps without justification give 0 at once; (ii) continuous scoring — correct solutions score high, incorrect
ones low, graded by efficiency and intermediate errors. The reference solution from exploration is shown so the
judge checks that every critical step appears (directly or by an equivalent). The judge answers with a score in
[0, 1]; an unparseable answer is retried (sampled at llm.base.RETRY_TEMPERATURE when the judge is greedy, since a
greedy retry repeats itself), then the documented fallback applies: the environment's state check
score (if the mode has one) else 0, and it is counted.

``ConstrainedJudge`` is the in-process judge that always answers: the same prompt, the reply forced to
``Score:``, and the model picks one of ``SCORE_LEVELS`` by log-probability (llm/choice.py) — never unparseable,
so its fallback count is 0 by construction. The written analysis of the free answer is skipped.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Sequence

from evolvekit.env.action_text import format_call
from evolvekit.llm.base import LLM, SamplingParams, retry_params
from evolvekit.llm.choice import ChoiceScorer, calibrated
from evolvekit.types import ChatMessage, Task, Trajectory

JUDGE_SYSTEM = """You grade how well an AI agent completed a task, from its trajectory.
Principle 1 — relevance and repetition: if the trajectory contains steps unrelated to the task, hallucinated
results, or redundant repeated steps without a clear reason, the score is 0.
Principle 2 — continuous scoring: a correct solution scores between 0.7 and 1.0 (higher when efficient and free
of intermediate errors); an incorrect or incomplete one scores between 0.0 and 0.3 (higher for partial progress).
Reference check: a REFERENCE SOLUTION found while exploring the environment is given. Check that every critical
step of it appears in the agent's execution, directly or through a functionally equivalent alternative.
End your answer with a line: Score: <number between 0 and 1>"""


def judge_prompt(task: Task, traj: Trajectory) -> list[ChatMessage]:
    ref = "\n".join(format_call(c) for turn in (task.reference_solution or []) for c in turn) or "(none)"
    steps = "\n".join(
        f"Step {i}: {s.action_text[:400]}\nResult: {s.observation[:400]}" for i, s in enumerate(traj.steps)
    )
    return [
        ChatMessage(role="system", content=JUDGE_SYSTEM),
        ChatMessage(
            role="user",
            content=f"TASK:\n{chr(10).join(task.turns)}\n\nREFERENCE SOLUTION:\n{ref}\n\n"
            f"AGENT TRAJECTORY:\n{steps or '(no steps)'}",
        ),
    ]


_SCORE = re.compile(r"score\s*[:=]\s*\**\s*([01](?:\.\d+)?|\.\d+)", re.IGNORECASE)


def parse_judge_score(text: str) -> float | None:
    """The last 'Score: x' in the answer, x in [0, 1]; None when absent or out of range."""
    found = _SCORE.findall(text or "")
    if not found:
        return None
    value = float(found[-1])
    return value if 0.0 <= value <= 1.0 else None


@dataclass
class JudgeReport:
    scores: list[float | None] = field(default_factory=list)
    calls: int = 0
    fallbacks: int = 0
    prompt_tokens: int = 0  # a forced choice: its prompt only (nothing is generated)
    completion_tokens: int = 0


class LLMJudge:
    def __init__(self, llm: LLM, params: SamplingParams, max_retries: int = 2, batch: int = 8) -> None:
        self.llm, self.params, self.max_retries, self.batch = llm, params, max_retries, batch

    def score(self, pairs: Sequence[tuple[Task, Trajectory]]) -> JudgeReport:
        report = JudgeReport(scores=[None] * len(pairs))
        pending = list(range(len(pairs)))
        for attempt in range(self.max_retries + 1):
            if not pending:
                break
            still = []
            params = retry_params(self.params, attempt)
            for lo in range(0, len(pending), self.batch):
                chunk = pending[lo : lo + self.batch]
                outs = self.llm.chat([judge_prompt(*pairs[i]) for i in chunk], params)
                report.calls += len(chunk)
                for i, out in zip(chunk, outs):
                    report.prompt_tokens += out[0].num_prompt_tokens
                    report.completion_tokens += out[0].num_completion_tokens
                    s = parse_judge_score(out[0].text)
                    if s is None:
                        still.append(i)
                    else:
                        report.scores[i] = s
            pending = still
        report.fallbacks = len(pending)
        return report


# Principle 2's two bands, in steps of 0.1: incorrect work 0.0-0.3, correct work 0.7-1.0
SCORE_LEVELS = (0.0, 0.1, 0.2, 0.3, 0.7, 0.8, 0.9, 1.0)


class ConstrainedJudge:
    """The §3.4 judge for an in-process model: the reply is forced to ``Score:`` and the model picks the level."""

    def __init__(
        self, llm, params: SamplingParams, levels: Sequence[float] = SCORE_LEVELS, calibrate: bool = True
    ) -> None:
        self.llm, self.params, self.levels = llm, params, tuple(levels)
        self.scorer = ChoiceScorer(llm)
        self.rng = random.Random(params.seed or 0)
        self.lead = llm.encode("Score:")
        self.options = [llm.encode(f" {v:.1f}") for v in self.levels]
        self.prior: list[float] | None = None
        if calibrate:  # contextual calibration against a content-free task and trajectory (llm/choice.py)
            blank = Task(task_id="n/a", env_name="n/a", query="N/A")
            self.prior = calibrated(
                self.scorer,
                llm.apply_chat_template(judge_prompt(blank, Trajectory(task_id="n/a"))) + self.lead,
                self.options,
            )

    def score(self, pairs: Sequence[tuple[Task, Trajectory]]) -> JudgeReport:
        report = JudgeReport(scores=[None] * len(pairs))
        for i, pair in enumerate(pairs):
            prompt = self.llm.apply_chat_template(judge_prompt(*pair)) + self.lead
            pick, _ = self.scorer.pick(prompt, self.options, self.params.temperature, self.rng, self.prior)
            report.scores[i] = self.levels[pick]
            report.calls += 1
            report.prompt_tokens += len(prompt)
        return report


def constant_agreement(states: Sequence[float | None], threshold: float = 0.5) -> float | None:
    """The agreement with the state check of the better constant answer (always 'pass' or always 'fail'): the
    baseline a judge must beat to carry any signal (issue 53: the 135M judge's 0.03-0.25 was below it)."""
    known = [s for s in states if s is not None]
    if not known:
        return None
    passed = sum(s >= threshold for s in known) / len(known)
    return max(passed, 1.0 - passed)


def agreement_with_state(
    judged: Sequence[float | None], states: Sequence[float | None], threshold: float = 0.5
) -> float | None:
    """Share of trajectories where the judge and the state check agree on pass/fail (both at or above
    ``threshold``, or both below); None when no trajectory has both."""
    pairs = [(j, s) for j, s in zip(judged, states) if j is not None and s is not None]
    if not pairs:
        return None
    return sum((j >= threshold) == (s >= threshold) for j, s in pairs) / len(pairs)
