"""Self-attributing's stage (attributing/stage.py): the grounded labels behind the information boundary (which
reference each task's labels may read, the run.oracle switch, the steps' gold distances), the self-derived and
borrowed references and their counts, and a non-grounded source's measured agreement with the grounded labels
(who is a yardstick and who is not). A recording step-credit source and a stand-in store; no model."""

from __future__ import annotations

import pytest
from conftest import TaskIndexStore

from evolvekit.attributing.sources import STEP_CREDIT, CreditResult
from evolvekit.attributing.stage import AttributedSamples, grounded_for
from evolvekit.boundary import InformationBoundary
from evolvekit.config import load_config
from evolvekit.protocols import IterationContext
from evolvekit.train.sample_stage import SampleSettings
from evolvekit.types import Step, StepGrounding, StepLabel, Task, TaskSource, ToolCall, Trajectory

G, B, N = StepLabel.GOOD, StepLabel.BAD, StepLabel.NEUTRAL
ON = ["attributing.enabled=true", "attributing.source=grounded"]


def _call(name, **args):
    return ToolCall(name=name, arguments=args)


def _task(task_id, query, source=TaskSource.REAL, ref=None):
    return Task(task_id=task_id, env_name="x", query=query, source=source, reference_solution=ref)


def _traj(task_id, calls, reward, grounding=None):
    """One step per call (each ran), then a final answer."""
    steps = [
        Step(index=i, action_text="", tool_calls=[c], calls=[{"ok": True}], grounding=grounding)
        for i, c in enumerate(calls)
    ]
    steps.append(Step(index=len(calls), action_text="done"))
    return Trajectory(task_id=task_id, group_id=task_id, outcome_reward=reward, steps=steps)


def _ctx(tasks):
    return IterationContext(iteration=0, seed=0, run_dir=None, store=TaskIndexStore(tasks))  # type: ignore[arg-type]


SENTINEL = [[_call("subtract", a=987654, b=1)]]  # a person-written reference: no rollout runs it


def test_grounded_for_reads_a_synthesized_reference_and_its_distances_and_closes_person_gold_by_default():
    closer = StepGrounding(state_changed=True, distance_before=2, distance_after=1)
    syn = _task("s", "add 1 and 2", TaskSource.SYNTHETIC, [[_call("add", a=1, b=2)]])
    traj = _traj("s", [_call("multiply", a=1, b=2), _call("add", a=1, b=2)], 1.0, closer)
    # rule 5 reads the distances of a task whose gold is open: the multiply brought the state closer
    assert grounded_for(syn, traj, 1.0) == [G, G, G]  # passed at exactly the threshold: the answer is GOOD
    assert grounded_for(syn, traj, 1.0 + 1e-9)[-1] == B  # below it: failed
    person = syn.model_copy(update={"source": TaskSource.REAL})
    assert grounded_for(person, traj, 1.0) == [N, N, G]  # no boundary given: closed, the fallback
    assert grounded_for(person, traj, 1.0, InformationBoundary(oracle=True)) == [G, G, G]


def test_the_stage_builds_its_boundary_from_run_oracle_unless_one_is_given():
    assert AttributedSamples.from_config(load_config(None, ON), None).boundary == InformationBoundary(False)
    oracle = load_config(None, [*ON, "run.oracle=true"])
    assert AttributedSamples.from_config(oracle, None).boundary == InformationBoundary(True)
    given = InformationBoundary(False)
    assert AttributedSamples.from_config(oracle, None, boundary=given).boundary is given
    cfg = load_config(None, ON)
    plain = AttributedSamples(SampleSettings.of(cfg), cfg.attributing, "grounded", 1.0, None)
    assert plain.boundary == InformationBoundary(False)


@pytest.fixture
def probe(monkeypatch):
    """A step-credit source that answers fixed labels per trajectory (by its position in the batch)."""
    answers: list = []

    def source(inputs):
        assert "987654" not in repr(inputs.tasks)  # closed gold never reaches a source
        return CreditResult(labels=list(answers), metrics={"probe/called": 1.0})

    monkeypatch.setitem(STEP_CREDIT, "probe", source)
    return answers


def test_grounded_labels_use_the_task_the_boundary_opens(probe):
    syn = _task("s", "Add 1 and 2.", TaskSource.SYNTHETIC, [[_call("add", a=1, b=2)]])
    person = _task("p", "What is 3 plus 4?", ref=[[_call("add", a=3, b=4)]])
    live = [_traj("s", [_call("add", a=1, b=2)], 0.0), _traj("p", [_call("add", a=3, b=4)], 0.0)]
    probe[:] = [None, None]
    metrics: dict[str, float] = {}
    closed = AttributedSamples.from_config(load_config(None, ON), None)
    closed._labels(_ctx([syn, person]), live, "grounded", metrics)
    assert [t.step_attributions for t in live] == [[G, B], [N, B]]  # the synthesized reference only
    assert "attribution/agreement_with_grounded" not in metrics  # grounded is not scored against itself
    oracle = AttributedSamples.from_config(load_config(None, [*ON, "run.oracle=true"]), None)
    oracle._labels(_ctx([syn, person]), live, "grounded", {})
    assert [t.step_attributions for t in live] == [[G, B], [G, B]]  # the switch opens the person's gold


def test_agreement_is_measured_on_synthesized_and_own_references_only_and_counts_the_references(probe):
    tasks = [
        _task("s", "Add 1 and 2.", TaskSource.SYNTHETIC, [[_call("add", a=1, b=2)]]),
        _task("p", "What is 3 plus 4?", ref=SENTINEL),
        _task("q", "What is 5 plus 6?", ref=SENTINEL),  # p's wording: borrows p's success
        _task("u", "Sort the list.", ref=SENTINEL),  # nothing similar
    ]
    live = [
        _traj("s", [_call("add", a=1, b=2)], 1.0),  # grounded [G, G]
        _traj("p", [_call("add", a=3, b=4)], 1.0),  # p's own success: grounded [G, G]
        _traj("p", [_call("multiply", a=3, b=4)], 0.0),  # against p's own: [N, B]
        _traj("q", [_call("add", a=5, b=6)], 0.0),  # borrowed (tool names): [G, B]
        _traj("u", [_call("sort")], 0.0),  # no reference: [N, B]
        _traj("a", [_call("open")], 0.0),  # a task missing from the store
    ]
    probe[:] = [[G, B], [G, G], [B, B], [G, G], [G, G], None]
    stage = AttributedSamples.from_config(load_config(None, [*ON, "attributing.similar_success_min=0.8"]), None)
    metrics: dict[str, float] = {}
    labels = stage._labels(_ctx(tasks), live, "probe", metrics)
    assert labels == probe
    # compared: s (1 of 2 agree) and p's own two episodes (2 of 2, then 1 of 1: NEUTRAL is no verdict) = 4 of 5;
    # q's reference is borrowed and u has none, so neither is a yardstick
    assert metrics["attribution/agreement_with_grounded"] == pytest.approx(0.8)
    assert metrics["probe/called"] == 1.0
    assert (
        metrics["attribution/closed_tasks"],
        metrics["attribution/self_referenced"],
        metrics["attribution/similar_referenced"],
    ) == (4.0, 1.0, 1.0)  # p, q, u and a are closed; s is synthesized
    assert [t.attribution_source for t in live] == ["probe"] * 5 + [None]
    assert [t.flags.attribution_neutralised for t in live] == [False] * 5 + [True]


def test_similarity_reads_every_turn_of_a_multi_turn_request(probe):
    solved = _task("m1", ["What is 3 plus 4?", "Then double it."], ref=SENTINEL)
    failed = _task("m2", ["What is 5 plus 6?", "Then double it."], ref=SENTINEL)
    done = Step(index=1, action_text="7")
    win = Trajectory(task_id="m1", outcome_reward=1.0, steps=[_traj("m1", [_call("add", a=3, b=4)], 1).steps[0], done])
    lose = _traj("m2", [_call("add", a=5, b=7)], 0.0)
    probe[:] = [None, None]
    stage = AttributedSamples.from_config(load_config(None, [*ON, "attributing.similar_success_min=0.95"]), None)
    metrics: dict[str, float] = {}
    stage._labels(_ctx([solved, failed]), [win, lose], "probe", metrics)
    assert metrics["attribution/similar_referenced"] == 1.0  # the same words in both turns: similarity 1
