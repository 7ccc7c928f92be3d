"""The step-wise attributor (§5.1): one LLM call per trajectory, retried when unparseable, then neutralised.

Calls are issued in batches of ``concurrency`` conversations (the local backend batches them into one
generation; the OpenAI-compatible backend sends them concurrently). Cost — calls, prompt/completion tokens,
seconds — is returned with the labels so the loop logs it per iteration.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Sequence

from evolvekit.attributing.prompts import SYSTEM_PROMPT, parse_attribution, user_prompt
from evolvekit.llm.base import LLM, SamplingParams, retry_params
from evolvekit.progress import StageProgress
from evolvekit.types import ChatMessage, StepLabel, Task, Trajectory

log = logging.getLogger(__name__)


@dataclass
class AttributionCost:
    calls: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


@dataclass
class AttributionResult:
    labels: list[list[StepLabel] | None]  # per trajectory; None = neutralised
    cost: AttributionCost = field(default_factory=AttributionCost)
    failures: int = 0

    def metrics(self, prefix: str = "attribution/") -> dict[str, float]:
        flat = [lab for labs in self.labels if labs for lab in labs]
        n = len(self.labels) or 1
        return {
            prefix + "good_ratio": (sum(lab == StepLabel.GOOD for lab in flat) / len(flat)) if flat else 0.0,
            prefix + "parse_failure_rate": self.failures / n,
            prefix + "neutralised": float(self.failures),
            prefix + "calls": float(self.cost.calls),
            prefix + "retries": float(self.cost.retries),
            prefix + "prompt_tokens": float(self.cost.prompt_tokens),
            prefix + "completion_tokens": float(self.cost.completion_tokens),
            prefix + "seconds": self.cost.seconds,
        }


def _conversation(task: Task | None, traj: Trajectory) -> list[ChatMessage]:
    """Fig. 9's conversation. Its overall score is the outcome (Eq. 19; Figs. 8-9), before reward shaping: a failed
    episode with a format bonus is judged under the rules for a failure, not the "POSITIVE" ones."""
    return [
        ChatMessage(role="system", content=SYSTEM_PROMPT),
        ChatMessage(role="user", content=user_prompt(task, traj, traj.unshaped_outcome)),
    ]


class StepAttributor:
    def __init__(
        self, llm: LLM, params: SamplingParams, max_retries: int = 2, concurrency: int = 4, constrained: bool = False
    ) -> None:
        self.llm, self.params = llm, params
        self.max_retries, self.concurrency = max_retries, max(1, concurrency)
        self.labeler = None
        if constrained:  # forced-choice labels (attributing/constrained.py); needs an in-process model
            from evolvekit.attributing.constrained import ConstrainedLabeler

            self.labeler = ConstrainedLabeler(llm, params.temperature, params.seed or 0)

    def _attribute_constrained(self, trajectories: Sequence[Trajectory], tasks: dict[str, Task]) -> AttributionResult:
        assert self.labeler is not None
        t0 = time.perf_counter()
        result = AttributionResult(labels=[None] * len(trajectories))
        with StageProgress("step attribution", sum(bool(t.steps) for t in trajectories), logger=log) as progress:
            for i, t in enumerate(trajectories):
                if not t.steps:
                    result.labels[i] = []
                    continue
                conv = _conversation(tasks.get(t.task_id), t)
                labels, prompt_tokens, generated = self.labeler.label(conv, len(t.steps))
                result.labels[i] = labels
                result.cost.calls += 1
                result.cost.prompt_tokens += prompt_tokens
                result.cost.completion_tokens += generated
                progress.advance()
        result.cost.seconds = time.perf_counter() - t0
        return result

    def attribute(self, trajectories: Sequence[Trajectory], tasks: dict[str, Task]) -> AttributionResult:
        if self.labeler is not None:
            return self._attribute_constrained(trajectories, tasks)
        t0 = time.perf_counter()
        result = AttributionResult(labels=[None] * len(trajectories))
        pending = [i for i, t in enumerate(trajectories) if t.steps]
        for i, t in enumerate(trajectories):
            if not t.steps:
                result.labels[i] = []
        with StageProgress("step attribution", len(pending), logger=log) as progress:
            self._attribute_free(trajectories, tasks, pending, result, progress)
        result.cost.seconds = time.perf_counter() - t0
        return result

    def _attribute_free(
        self,
        trajectories: Sequence[Trajectory],
        tasks: dict[str, Task],
        pending: list[int],
        result: AttributionResult,
        progress: StageProgress,
    ) -> None:
        """The paper's free-text attributor: chunks of ``concurrency`` conversations, unparseable ones retried."""
        for attempt in range(self.max_retries + 1):
            if not pending:
                break
            if attempt:
                result.cost.retries += len(pending)
            still = []
            for lo in range(0, len(pending), self.concurrency):
                chunk = pending[lo : lo + self.concurrency]
                convs = [_conversation(tasks.get(trajectories[i].task_id), trajectories[i]) for i in chunk]
                try:
                    outs = self.llm.chat(convs, retry_params(self.params, attempt))
                except Exception as err:  # a failing attributor call must not take the update down
                    log.warning("attributor call failed: %s", err)
                    still += chunk
                    continue
                result.cost.calls += len(chunk)
                for i, out in zip(chunk, outs):
                    comp = out[0]
                    result.cost.prompt_tokens += comp.num_prompt_tokens
                    result.cost.completion_tokens += comp.num_completion_tokens
                    parsed = parse_attribution(comp.text, len(trajectories[i].steps))
                    if parsed.labels is None:
                        still.append(i)
                    else:
                        result.labels[i] = parsed.labels
                        progress.advance()
            pending = still
        result.failures = len(pending)
