"""CoEvolve's weakness signals (CoEvolve §3.1) and signal-guided re-exploration into new tasks (§3.2-3.3).

Signals, evaluated independently on every training trajectory (threshold τ = ``coevolve.success_threshold``, 0.5):
- forgetting: the task was solved in an *earlier* iteration and this trajectory fails it — the task's sliding window
  holds its best score of each of its last W iterations (CoEvolve's H_recent, one entry per time the task was
  trained), one of them ≥ τ, and the current score is < τ. A task's first group never raises it, whatever its mix;
- boundary: the task's group has both a success (> τ) and a failure (< τ) — all its trajectories are marked;
- rare: the trajectory's action pattern (its sequence of tool names) has count c_p with c_p / N < θ/100, once the
  total number of observed patterns N ≥ N_min.
Every F iterations, the signal-annotated trajectories are reflected on by an LLM into an exploration context,
the environment is re-explored from it (several runs × several steps, with the paper's signal templates), and
the results are turned into tasks by the usual synthesis and curation (dedup, feasibility replay).
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence, runtime_checkable

from evolvekit.llm.base import LLM, SamplingParams
from evolvekit.types import ChatMessage, Task, Trajectory

log = logging.getLogger(__name__)

THRESHOLD = 0.5  # the paper's; coevolve.success_threshold overrides it


def forgetting(history: Sequence[float], s_now: float, threshold: float = THRESHOLD) -> bool:
    """CoEvolve (1): ∃ s_i ∈ H_recent with s_i ≥ τ, and s_now < τ."""
    return s_now < threshold and any(s >= threshold for s in history)


def boundary(group_scores: Sequence[float], threshold: float = THRESHOLD) -> bool:
    """CoEvolve (2): the group holds a success (> τ) and a failure (< τ)."""
    return any(s > threshold for s in group_scores) and any(s < threshold for s in group_scores)


def rare(count: int, total: int, theta_percent: float, n_min: int) -> bool:
    """CoEvolve (3): once N ≥ N_min, c_p / N < θ/100 and c_p > 0."""
    return total >= n_min and count > 0 and count / total < theta_percent / 100.0


def action_pattern(traj: Trajectory) -> str:
    names = [c.name for s in traj.steps for c in s.tool_calls]
    return "->".join(names) if names else "(no tool call)"


@dataclass(frozen=True)
class Signal:
    kind: str  # forgetting | boundary | rare
    trajectory_id: str
    task_id: str


class SignalTracker:
    """Signals over time: ``observe`` is called once per iteration with that iteration's trajectories."""

    def __init__(
        self, window: int = 5, theta_percent: float = 5.0, n_min: int = 50, threshold: float = THRESHOLD
    ) -> None:
        self.window, self.theta, self.n_min, self.threshold = window, theta_percent, n_min, threshold
        self.history: dict[str, deque] = {}  # task -> best score of each earlier iteration that trained it
        self.patterns: Counter = Counter()

    def observe(self, trajectories: Sequence[Trajectory]) -> list[Signal]:
        signals: list[Signal] = []
        live = [t for t in trajectories if not t.flags.failed]
        groups: dict[str, list[Trajectory]] = {}
        for t in live:
            groups.setdefault(t.group_id or t.task_id, []).append(t)
        for members in groups.values():
            if boundary([t.unshaped_outcome for t in members], self.threshold):
                signals += [Signal("boundary", t.trajectory_id, t.task_id) for t in members]
        for t in live:
            self.patterns[action_pattern(t)] += 1
        total = sum(self.patterns.values())
        best_now: dict[str, float] = {}
        for t in live:
            s_now = t.unshaped_outcome  # the task's score s_t: the outcome before shaping, as the run's success
            if forgetting(list(self.history.get(t.task_id, ())), s_now, self.threshold):
                signals.append(Signal("forgetting", t.trajectory_id, t.task_id))
            best_now[t.task_id] = max(best_now.get(t.task_id, s_now), s_now)
            if rare(self.patterns[action_pattern(t)], total, self.theta, self.n_min):
                signals.append(Signal("rare", t.trajectory_id, t.task_id))
        for task_id, best in best_now.items():  # this iteration becomes history only after it is judged
            self.history.setdefault(task_id, deque(maxlen=self.window)).append(best)
        return signals


GOALS = {
    "forgetting": (
        "Exploration Goal: Reinforce Forgotten Skills\nThe agent previously succeeded but now FAILS on this "
        "type of task.\nYour exploration should:\n1. Practice the exact operations from the context below\n"
        "2. Create variations with different parameters\n3. Connect this skill to related operations\n"
        "4. Build up from simple to complex usage\nContext of forgetting:\n{context}\n"
        "Focus on thorough practice of these specific operations."
    ),
    "rare": (
        "Exploration Goal: Explore Rare Scenarios\nThe agent encountered a RARE scenario that needs more exposure.\n"
        "Your exploration should:\n1. Explore variations of the scenario below\n2. Try different parameter "
        "combinations\n3. Test edge cases and boundary conditions\n4. Collect diverse examples of this rare "
        "pattern\nContext of rare event:\n{context}\nTry to discover and document various forms of this scenario."
    ),
    "boundary": (
        "Exploration Goal: Explore Boundary Cases\nThe agent's performance is BORDERLINE (near success/failure "
        "threshold).\nYour exploration should:\n1. Explore boundary conditions for these operations\n2. Try "
        "similar tasks with slight parameter variations\n3. Focus on distinguishing factors between success "
        "and failure\n4. Collect examples at various difficulty levels\nContext of boundary case:\n{context}\n"
        "Focus on understanding what makes the difference between success and failure."
    ),
}

REFLECT_SYSTEM = "You are an expert at analyzing trajectory-level failure and behavioral instability for an LLM agent."


def reflection_prompt(kind: str, task: Task | None, traj: Trajectory) -> list[ChatMessage]:
    steps = "\n".join(f"Action: {s.action_text[:300]}\nFeedback: {s.observation[:300]}" for s in traj.steps)
    query = "\n".join(task.turns) if task else traj.task_id
    return [
        ChatMessage(role="system", content=REFLECT_SYSTEM),
        ChatMessage(
            role="user",
            content=f"Analyze the following feedback signal and trajectory evidence:\n"
            f"Signal: {kind}\nTask: {query}\nScore: {traj.unshaped_outcome:g}\n{steps}\n\n"
            "Summarize in two or three sentences where and how the agent fails or behaves unstably, as a "
            "context for exploring the environment further.",
        ),
    ]


@runtime_checkable
class TracedExplore(Protocol):
    """A re-exploration callable that keeps the traces it explored (``questioning/pipeline.py: _Reexplore``)."""

    traces: list

    def __call__(self, kind: str, goal: str) -> list[Task]: ...


class CoEvolveRegenerator:
    """Turns signal-annotated trajectories into new curated tasks (signal → reflect → re-explore → synthesize)."""

    def __init__(
        self,
        reflect_llm: LLM,
        params: SamplingParams,
        explore_fn: Callable[[str, str], list[Task]],
        max_contexts: int = 4,
    ) -> None:
        self.llm, self.params, self.explore_fn, self.max_contexts = reflect_llm, params, explore_fn, max_contexts
        # an exploring callable that keeps its exploration traces (for the run store), found once
        self.traced: TracedExplore | None = explore_fn if isinstance(explore_fn, TracedExplore) else None

    def take_traces(self) -> list:
        """The exploration traces of the re-explorations since the last call (none for an untraced callable)."""
        if self.traced is None:
            return []
        traces, self.traced.traces = list(self.traced.traces), []
        return traces

    def regenerate(
        self, signals: Sequence[Signal], trajectories: dict[str, Trajectory], tasks: dict[str, Task]
    ) -> list[Task]:
        chosen: list[Signal] = []
        seen_tasks: set[tuple[str, str]] = set()
        for kind in ("forgetting", "boundary", "rare"):  # one context per (signal kind, task), forgetting first
            for s in signals:
                if s.kind == kind and (kind, s.task_id) not in seen_tasks and s.trajectory_id in trajectories:
                    seen_tasks.add((kind, s.task_id))
                    chosen.append(s)
        chosen = chosen[: self.max_contexts]
        if not chosen:
            return []
        outs = self.llm.chat(
            [reflection_prompt(s.kind, tasks.get(s.task_id), trajectories[s.trajectory_id]) for s in chosen],
            self.params,
        )
        new: list[Task] = []
        for s, out in zip(chosen, outs):
            context = out[0].text.strip() or trajectories[s.trajectory_id].task_id
            for t in self.explore_fn(s.kind, GOALS[s.kind].format(context=context)):
                t.metadata["signal"] = {"kind": s.kind, "trajectory_id": s.trajectory_id, "task_id": s.task_id}
                new.append(t)
        return new
