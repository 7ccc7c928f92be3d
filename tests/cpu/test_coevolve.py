"""questioning/coevolve.py against hand-computed cases (issue 53: its mutation look): the three signal rules at
their boundaries (CoEvolve §3.1), the tracker's grouping, thresholds and counts, the reflection prompt, and the
regenerator's choice of contexts (§3.2)."""

from __future__ import annotations

import pytest

from evolvekit.llm.base import Completion, SamplingParams
from evolvekit.questioning.coevolve import (
    GOALS,
    CoEvolveRegenerator,
    Signal,
    SignalTracker,
    action_pattern,
    boundary,
    forgetting,
    rare,
    reflection_prompt,
)
from evolvekit.types import Step, Task, ToolCall, Trajectory, TrajectoryFlags


def _tr(task, score, group=None, tid=None, calls=("add",)):
    steps = [Step(index=0, action_text="x", tool_calls=[ToolCall(name=c) for c in calls])]
    kw = {"trajectory_id": tid} if tid else {}
    return Trajectory(task_id=task, group_id=group, outcome_reward=score, steps=steps, **kw)


def test_the_rules_at_their_boundaries():
    assert forgetting([0.5], 0.0) and not forgetting([0.49], 0.0)  # an earlier score of exactly τ was a success
    assert not forgetting([1.0], 0.5)  # and a current score of exactly τ is not a failure
    assert not boundary([1.0, 0.5]) and not boundary([0.5, 0.0]) and boundary([0.51, 0.49])  # strict on both sides
    assert not rare(5, 100, 5.0, 50)  # c/N = θ/100 exactly is not rare
    assert rare(497, 10_000, 5.0, 50)  # 4.97% < 5%
    assert rare(2, 50, 5.0, 50) and not rare(2, 49, 5.0, 50)  # N ≥ N_min, inclusive


def test_action_patterns():
    assert action_pattern(_tr("a", 1.0, calls=("cd", "ls"))) == "cd->ls"
    assert action_pattern(_tr("a", 1.0, calls=())) == "(no tool call)"


def test_the_trackers_defaults_are_the_papers():
    t = SignalTracker()
    assert (t.window, t.theta, t.n_min, t.threshold) == (5, 5.0, 50, 0.5)
    assert CoEvolveRegenerator(None, SamplingParams(), lambda kind, goal: []).max_contexts == 4


def test_groups_are_by_group_id_else_by_task_and_every_boundary_group_counts():
    tracker = SignalTracker(n_min=10_000)
    split = [_tr("a", 1.0, group="g1", tid="x"), _tr("a", 0.0, group="g2", tid="y")]
    assert tracker.observe(split) == []  # one task, two groups of one outcome each: no boundary
    tracker = SignalTracker(n_min=10_000)
    both = [
        _tr("a", 1.0, tid="a1"),
        _tr("a", 0.0, tid="a0"),  # no group id: grouped by task
        _tr("b", 1.0, group="gb", tid="b1"),
        _tr("b", 0.0, group="gb", tid="b0"),
    ]
    got = tracker.observe(both)
    assert sorted((s.kind, s.trajectory_id, s.task_id) for s in got) == [
        ("boundary", "a0", "a"),
        ("boundary", "a1", "a"),
        ("boundary", "b0", "b"),
        ("boundary", "b1", "b"),
    ]


def test_the_tracker_uses_its_threshold_for_boundary_and_forgetting():
    strict = SignalTracker(n_min=10_000, threshold=0.9)
    assert [s.kind for s in strict.observe([_tr("a", 0.95, tid="h")])] == []
    got = strict.observe([_tr("a", 0.8, group="g", tid="lo"), _tr("a", 0.95, group="g", tid="hi")])
    assert sorted((s.kind, s.trajectory_id, s.task_id) for s in got) == [
        ("boundary", "hi", "a"),
        ("boundary", "lo", "a"),
        ("forgetting", "lo", "a"),  # 0.95 earlier ≥ 0.9, now 0.8 < 0.9 (at 0.5 neither signal would fire)
    ]


def test_patterns_count_one_per_trajectory_and_rare_names_its_task():
    tracker = SignalTracker(theta_percent=30.0, n_min=4)
    trajs = [_tr(f"t{i}", 1.0, tid=f"c{i}") for i in range(3)] + [_tr("odd", 1.0, tid="r", calls=("cd",))]
    got = tracker.observe(trajs)
    assert tracker.patterns == {"add": 3, "cd": 1}
    assert [(s.kind, s.trajectory_id, s.task_id) for s in got] == [("rare", "r", "odd")]  # 1/4 < 30%
    failed = _tr("z", 1.0, calls=("ls",)).model_copy(update={"flags": TrajectoryFlags(failed=True)})
    tracker.observe([failed])
    assert "ls" not in tracker.patterns  # an infrastructure failure is not observed


def test_the_reflection_prompt_carries_signal_task_score_and_clipped_steps():
    task = Task(task_id="k", env_name="bfcl", query=["first turn", "second turn"])
    traj = Trajectory(
        task_id="k",
        outcome_reward=0.5,
        steps=[Step(index=0, action_text="A" * 400, observation="B" * 400), Step(index=1, action_text="c")],
    )
    system, user = reflection_prompt("boundary", task, traj)
    assert system.role == "system" and "trajectory-level failure" in system.content
    assert user.content == (
        "Analyze the following feedback signal and trajectory evidence:\n"
        "Signal: boundary\nTask: first turn\nsecond turn\nScore: 0.5\n"
        f"Action: {'A' * 300}\nFeedback: {'B' * 300}\nAction: c\nFeedback: \n\n"
        "Summarize in two or three sentences where and how the agent fails or behaves unstably, as a "
        "context for exploring the environment further."
    )
    _, no_task = reflection_prompt("rare", None, traj.model_copy(update={"outcome_reward": None}))
    assert "Signal: rare\nTask: k\nScore: 0\n" in no_task.content


class _Reflector:
    name = "reflector"

    def __init__(self):
        self.calls = []

    def chat(self, conversations, params):
        self.calls.append((conversations, params))
        return [[Completion(text=f"context {i}")] for i, _ in enumerate(conversations)]


def test_the_regenerator_chooses_one_context_per_kind_and_task_and_tags_new_tasks():
    reflector, explored = _Reflector(), []

    def explore(kind, goal):
        explored.append((kind, goal))
        return [Task(task_id=f"new-{len(explored)}", env_name="bfcl", query="q")]

    params = SamplingParams(temperature=0.3)
    regen = CoEvolveRegenerator(reflector, params, explore, max_contexts=4)
    trajs = {t.trajectory_id: t for t in (_tr("a", 0.0, tid="t1"), _tr("a", 0.0, tid="t2"), _tr("b", 0.0, tid="t3"))}
    tasks = {"a": Task(task_id="a", env_name="bfcl", query="the task a")}
    signals = [
        Signal("rare", "t1", "a"),
        Signal("rare", "t2", "a"),  # the same kind and task: one context
        Signal("rare", "t3", "b"),
        Signal("rare", "missing", "c"),  # no such trajectory: skipped
    ]
    new = regen.regenerate(signals, trajs, tasks)
    ((conversations, used),) = reflector.calls
    assert used is params and len(conversations) == 2
    assert "Signal: rare\nTask: the task a\n" in conversations[0][1].content  # the task's own text when known
    assert "Signal: rare\nTask: b\n" in conversations[1][1].content
    assert [k for k, _ in explored] == ["rare", "rare"] and explored[0][1] == GOALS["rare"].format(context="context 0")
    assert [t.metadata["signal"] for t in new] == [
        {"kind": "rare", "trajectory_id": "t1", "task_id": "a"},
        {"kind": "rare", "trajectory_id": "t3", "task_id": "b"},
    ]
    assert regen.take_traces() == []  # an exploring callable without traces


def test_a_traced_explorer_hands_its_traces_over_once():
    class Traced:
        def __init__(self):
            self.traces = []

        def __call__(self, kind, goal):
            self.traces.append(goal[:10])
            return []

    explore = Traced()
    regen = CoEvolveRegenerator(_Reflector(), SamplingParams(), explore)
    regen.regenerate([Signal("boundary", "t", "a")], {"t": _tr("a", 0.0, tid="t")}, {})
    assert regen.take_traces() == ["Exploratio"] and regen.take_traces() == [] and explore.traces == []


@pytest.mark.parametrize("empty", [[], [Signal("boundary", "nowhere", "a")]])
def test_no_context_asks_nothing(empty):
    reflector = _Reflector()
    assert CoEvolveRegenerator(reflector, SamplingParams(), lambda k, g: []).regenerate(empty, {}, {}) == []
    assert reflector.calls == []


def test_signals_read_the_outcome_before_shaping_as_the_runs_success_does():
    """Issue 77: with reward shaping on, a failed episode's shaped reward (format credit) can pass τ; the signals
    read the task's score before shaping, the run's one definition of success (Trajectory.unshaped_outcome)."""
    from evolvekit.types import RewardParts

    def shaped(tid, outcome, total):
        t = _tr("a", total, group="g", tid=tid)
        return t.model_copy(update={"rewards": RewardParts(outcome=outcome, format=1.0)})

    tracker = SignalTracker(n_min=10_000)
    # both failed (outcome 0) though one's shaped reward is 0.6 > τ: no boundary; the other pair is one
    assert tracker.observe([shaped("x", 0.0, 0.6), shaped("y", 0.0, 0.2)]) == []
    got = tracker.observe([shaped("p", 1.0, 1.0), shaped("q", 0.0, 0.6)])
    assert sorted((s.kind, s.trajectory_id) for s in got) == [("boundary", "p"), ("boundary", "q")]
    # a forgetting signal: solved before (outcome 1), now failed though shaped above τ
    assert [s.kind for s in tracker.observe([shaped("r", 0.0, 0.7)])] == ["forgetting"]


# CoEvolve's Figure 10, (a)-(c), copied line by line from the paper (blank lines left out)
_PAPER_GOALS = {
    "forgetting": [
        "Exploration Goal: Reinforce Forgotten Skills",
        "The agent previously succeeded but now FAILS on this type of task.",
        "Your exploration should:",
        "1. Practice the exact operations from the context below",
        "2. Create variations with different parameters",
        "3. Connect this skill to related operations",
        "4. Build up from simple to complex usage",
        "Context of forgetting:",
        "{context}",
        "Focus on thorough practice of these specific operations.",
    ],
    "rare": [
        "Exploration Goal: Explore Rare Scenarios",
        "The agent encountered a RARE scenario that needs more exposure.",
        "Your exploration should:",
        "1. Explore variations of the scenario below",
        "2. Try different parameter combinations",
        "3. Test edge cases and boundary conditions",
        "4. Collect diverse examples of this rare pattern",
        "Context of rare event:",
        "{context}",
        "Try to discover and document various forms of this scenario.",
    ],
    "boundary": [
        "Exploration Goal: Explore Boundary Cases",
        "The agent's performance is BORDERLINE (near success/failure threshold).",
        "Your exploration should:",
        "1. Explore boundary conditions for these operations",
        "2. Try similar tasks with slight parameter variations",
        "3. Focus on distinguishing factors between success and failure",
        "4. Collect examples at various difficulty levels",
        "Context of boundary case:",
        "{context}",
        "Focus on understanding what makes the difference between success and failure.",
    ],
}


def test_the_signal_goals_are_the_papers_templates():
    """The three exploration goals (CoEvolve Figure 10) word for word: a changed line fails here
    (benchmarks/audits/hand_mutants.py)."""
    from evolvekit.questioning.coevolve import GOALS

    assert {kind: text.split("\n") for kind, text in GOALS.items()} == _PAPER_GOALS
