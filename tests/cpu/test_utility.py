"""Evolving-RL's utility test of an experience (navigating/utility.py): the related tasks by task description, the
rollout jobs it asks for, and the keep rule (utility above the tasks' vanilla mean of this iteration), with a
recording stand-in for the rollouts and a table embedder."""

from __future__ import annotations

import numpy as np
import pytest

import evolvekit.navigating.utility as utility_mod
from evolvekit.engine.base import Engine
from evolvekit.navigating.utility import UtilityTester, experience_text, related_tasks
from evolvekit.types import Experience, ExperienceProvenance, Task, Trajectory

# two-turn source: the embedder sees the turns joined by a newline
SOURCE = Task(task_id="s", env_name="x", query=["add a", "then b"])
OTHERS = [Task(task_id=f"o{i}", env_name="x", query=f"other {i}") for i in range(4)]
OTHERS[2] = Task(task_id="o2", env_name="x", query=["other", "2"])  # two turns, joined by a newline too
VECS = {
    "add a\nthen b": [1.0, 0.0],
    "other 0": [0.1, 0.9],
    "other 1": [0.9, 0.1],
    "other\n2": [0.5, 0.5],
    "other 3": [-1.0, 0.0],
}


CALLS: list[list[str]] = []


def embed(texts):
    CALLS.append(list(texts))
    return np.array([VECS[t] for t in texts], dtype=np.float32)


def test_related_tasks_are_the_source_then_the_most_similar_descriptions():
    pool = [SOURCE] + OTHERS
    assert [t.task_id for t in related_tasks(SOURCE, pool, embed, 3)] == ["s", "o1", "o2"]
    assert [t.task_id for t in related_tasks(SOURCE, pool, embed, 2)] == ["s", "o1"]
    CALLS.clear()
    assert related_tasks(SOURCE, pool, embed, 1) == [SOURCE] and CALLS == []  # K = 1: no embedding at all
    assert related_tasks(SOURCE, [SOURCE], embed, 4) == [SOURCE]  # no other task: the source alone


class _Recorder:
    def __init__(self, reward):
        self.calls, self.reward = [], reward

    def __call__(self, jobs, make_env, engine, cfg, params, rendering, **kw):
        self.calls.append((list(jobs), make_env, engine, cfg, params, rendering, kw))
        return [Trajectory(task_id=j.task.task_id, outcome_reward=self.reward(j)) for j in jobs]


def _exp(content, task_ids=("s",)):
    return Experience(when_to_use="w", content=content, provenance=ExperienceProvenance(task_ids=list(task_ids)))


class _LLM:
    pass


@pytest.fixture
def rollouts(monkeypatch):
    def install(reward):
        rec = _Recorder(reward)
        monkeypatch.setattr(utility_mod, "run_rollouts", rec)
        return rec

    return install


def test_the_jobs_carry_the_experience_and_the_rollouts_get_the_testers_collaborators(rollouts):
    rec = rollouts(lambda j: 1.0)
    llm, make_env, template = _LLM(), object(), object()
    tester = UtilityTester(Engine(llm), make_env, "cfg", "params", "compact", embed, template=template)
    assert tester.engine.llm is llm and tester.k == 4  # the paper's K = 4 related tasks by default
    exp = _exp("good")
    tester.test([exp], {"s": SOURCE}, [SOURCE] + OTHERS, [])
    ((jobs, env, engine, cfg, params, rendering, kw),) = rec.calls
    assert [j.task.task_id for j in jobs] == ["s", "o1", "o2", "o0"]
    assert {(j.group_id, j.experience, j.experience_ids) for j in jobs} == {
        (f"utility-{exp.experience_id}", experience_text(exp), (exp.experience_id,))
    }
    assert (env, engine, cfg, params, rendering) == (make_env, tester.engine, "cfg", "params", "compact")
    assert kw == {"show_progress": False, "template": template}


def test_no_experience_with_a_known_source_runs_no_rollout(rollouts):
    rec = rollouts(lambda j: 1.0)
    tester = UtilityTester(Engine(_LLM()), None, None, None, "compact", embed, k=2)
    out = tester.test([_exp("x", ()), _exp("y", ("gone",))], {"s": SOURCE}, [SOURCE], [])
    assert rec.calls == [] and [(u, keep) for _, u, keep in out] == [(0.0, False), (0.0, False)]


def test_utility_beats_the_vanilla_mean_of_the_related_tasks_unguided_and_unfailed_only(rollouts):
    # rewards per (experience, task): "good" 0.5 on every task, "weak" 0.1; "great" 1.0 on s, 0.0 on o1
    def reward(job):
        if "great" in job.experience:
            return 1.0 if job.task.task_id == "s" else 0.0
        return 0.5 if "good" in job.experience else 0.1

    rollouts(reward)
    tester = UtilityTester(Engine(_LLM()), None, None, None, "compact", embed, k=2)
    vanilla = [
        Trajectory(task_id="s", outcome_reward=0.2),
        Trajectory(task_id="s", outcome_reward=0.4),  # s's mean: 0.3
        Trajectory(task_id="o1", outcome_reward=None),  # no reward counts as 0
        Trajectory(task_id="o1", outcome_reward=1.0, flags={"experience_guided": True}),  # not vanilla
        Trajectory(task_id="s", outcome_reward=1.0, flags={"failed": True}),  # not a rollout that ran
    ]
    orphan, good, great, weak = _exp("orphan", ()), _exp("good"), _exp("great"), _exp("weak")
    out = tester.test([orphan, good, great, weak], {"s": SOURCE}, [SOURCE] + OTHERS, vanilla)
    # baseline: mean over the related tasks with vanilla rollouts of their means = (0.3 + 0.0) / 2 = 0.15
    assert [(e.experience_id, round(u, 6), keep) for e, u, keep in out] == [
        (orphan.experience_id, 0.0, False),
        (good.experience_id, 0.5, True),
        (great.experience_id, 0.5, True),  # each experience reads its own rollouts: (1.0 + 0.0) / 2
        (weak.experience_id, 0.1, False),
    ]
    assert out[1][0].utility == 0.5
    at_baseline = tester.test(
        [_exp("good")], {"s": SOURCE}, [SOURCE] + OTHERS, [Trajectory(task_id="s", outcome_reward=0.5)]
    )
    assert at_baseline[0][1:] == (0.5, False)  # equal to the vanilla mean is no gain


def test_with_no_vanilla_rollout_of_a_related_task_the_baseline_is_zero(rollouts):
    rollouts(lambda j: 0.0)
    tester = UtilityTester(Engine(_LLM()), None, None, None, "compact", embed, k=2)
    out = tester.test([_exp("x")], {"s": SOURCE}, [SOURCE] + OTHERS, [Trajectory(task_id="o3", outcome_reward=1.0)])
    assert out[0][1:] == (0.0, False)  # utility 0 against baseline 0: not kept
    rollouts(lambda j: 0.1)
    assert tester.test([_exp("x")], {"s": SOURCE}, [SOURCE] + OTHERS, [])[0][1:] == (pytest.approx(0.1), True)
