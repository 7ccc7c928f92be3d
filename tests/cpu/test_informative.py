"""Groups that teach (issue 96, item 2): informative groups, the pass-rate histogram, and DAPO's dynamic sampling,
which replaces a zero-variance group before the update within a bounded extra budget."""

from __future__ import annotations

from evolvekit.config import load_config
from evolvekit.orchestrator.informative import PASS_BINS, group_metrics, informative, pass_bin, refill
from evolvekit.orchestrator.loop import MasterLoop, Stages
from evolvekit.orchestrator.run_dir import open_run
from evolvekit.types import RewardParts, Task, Trajectory, TrajectoryFlags


def _task(tid: str) -> Task:
    return Task(task_id=tid, env_name="bfcl", query=tid)


def _group(tid: str, outcomes, shaped=None) -> list[Trajectory]:
    return [
        Trajectory(
            task_id=tid,
            group_id=f"g-{tid}",
            outcome_reward=(shaped[i] if shaped else r),
            rewards=RewardParts(outcome=r),
        )
        for i, r in enumerate(outcomes)
    ]


def test_a_group_is_informative_when_its_outcomes_before_shaping_differ():
    assert informative(_group("a", [1.0, 0.0]))
    assert not informative(_group("a", [1.0, 1.0])) and not informative(_group("a", [0.0]))
    # a varying format bonus in a group of failures does not make it teach the task
    assert not informative(_group("a", [0.0, 0.0], shaped=[0.1, 0.0]))
    crashed = _group("a", [1.0, 0.0])
    crashed[1].flags = TrajectoryFlags(failed=True)
    assert not informative(crashed)  # a crashed rollout is no outcome


def test_pass_bins_by_hand():
    assert [pass_bin(r) for r in (0.0, 0.1, 0.25, 0.26, 0.5, 0.75, 0.9, 1.0)] == [
        "0", "0-25", "0-25", "25-50", "25-50", "50-75", "75-100", "100",
    ]  # fmt: skip


def test_group_metrics_count_distinct_tasks_informative_groups_and_the_pass_rate_histogram():
    trajs = _group("a", [1.0, 0.0, 0.0, 0.0]) + _group("b", [1.0, 1.0]) + _group("c", [0.0, 0.0]) + _group("d", [1, 0])
    m = group_metrics(trajs, 0.5)
    assert (m["tasks/distinct"], m["groups/informative"], m["groups/zero_variance"]) == (4.0, 2.0, 2.0)
    assert {b: m[f"tasks/pass_rate_hist/{b}"] for b in PASS_BINS} == {
        "0": 1.0, "0-25": 1.0, "25-50": 1.0, "50-75": 0.0, "75-100": 0.0, "100": 1.0,
    }  # fmt: skip


OUTCOMES = {"a": [1.0, 0.0], "b": [1.0, 1.0], "c": [0.0, 0.0], "s1": [0.0, 0.0], "s2": [1.0, 0.0], "s3": [0.0, 1.0]}


def _roll(rolled: list):
    def roll(tasks):
        rolled.append([t.task_id for t in tasks])
        return [t for task in tasks for t in _group(task.task_id, OUTCOMES[task.task_id])]

    return roll


def test_a_zero_variance_group_is_replaced_by_an_informative_spare_in_its_place():
    tasks = [_task("a"), _task("b"), _task("c")]
    trajs = [t for task in tasks for t in _group(task.task_id, OUTCOMES[task.task_id])]
    spares = [_task(s) for s in ("a", "s1", "s2", "s3")]
    rolled: list = []
    r = refill(tasks, trajs, spares, _roll(rolled), budget=8, seed=0)
    assert r.zero_variance == 2 and r.replaced == 2
    assert [t.task_id for t in r.tasks][0] == "a" and {t.task_id for t in r.tasks[1:]} == {"s2", "s3"}
    assert all(informative(trajs) for trajs in _by_task(r.trajectories).values())
    assert "a" not in [tid for batch in rolled for tid in batch]  # a task of this iteration is no spare
    assert r.extra_groups == sum(len(b) for b in rolled) <= 8
    assert len(r.trajectories) == 6  # the batch keeps its size


def test_the_extra_budget_bounds_the_spare_groups_and_zero_means_off():
    tasks = [_task("b"), _task("c")]
    trajs = [t for task in tasks for t in _group(task.task_id, OUTCOMES[task.task_id])]
    spares = [_task(s) for s in ("s1", "s2", "s3")]
    rolled: list = []
    r = refill(tasks, trajs, spares, _roll(rolled), budget=1, seed=3)
    assert r.extra_groups == 1 and sum(len(b) for b in rolled) == 1 and r.replaced <= 1
    off: list = []
    same = refill(tasks, trajs, spares, _roll(off), budget=0, seed=3)
    assert off == [] and same.tasks == tasks and same.trajectories == trajs and same.replaced == 0
    none_left = refill(tasks, trajs, [], _roll(off), budget=5, seed=3)
    assert off == [] and none_left.replaced == 0 and none_left.zero_variance == 2


def _by_task(trajs):
    out: dict = {}
    for t in trajs:
        out.setdefault(t.task_id, []).append(t)
    return out


class _Supply:
    def __init__(self):
        self.pool = [_task(t) for t in ("b", "a", "s2")]

    def training_set(self):
        return list(self.pool)

    def tasks(self, ctx):
        return self.pool[:2]

    def observe(self, ctx, trajectories):
        return {}

    def commit(self, c, store, iteration):
        pass


class _Rollouts:
    last_metrics: dict = {}

    def __init__(self):
        self.asked: list = []

    def rollout(self, ctx, tasks):
        self.asked.append([t.task_id for t in tasks])
        return [t for task in tasks for t in _group(task.task_id, OUTCOMES[task.task_id])]


class _Rest:
    def process(self, ctx, trajectories):
        return {}

    def commit(self, c, store, iteration):
        pass

    def build(self, ctx, trajectories):
        self.seen = [t.task_id for t in trajectories]
        return list(trajectories), {}

    def update(self, ctx, samples):
        return {}

    def save(self, path):
        path.mkdir(parents=True, exist_ok=True)
        return path


def test_the_loop_replaces_a_zero_variance_group_before_the_update_and_reports_it(tmp_path):
    sets = [f"run.out_dir={tmp_path}", "train.iterations=1", "train.eval_before=false", "train.eval_after=false"]
    for refill_groups, want in ((2, {"a", "s2"}), (0, {"a", "b"})):
        cfg, run_dir, store = open_run(load_config(None, [*sets, f"train.refill_groups={refill_groups}"]), None)
        rollouts, rest = _Rollouts(), _Rest()
        stages = Stages(_Supply(), rollouts, rest, rest, rest)  # type: ignore[arg-type]
        summary = MasterLoop(cfg, run_dir, store, stages).run()
        assert set(rest.seen) == want  # what the update learned from
        assert summary["distinct_tasks_trained"] == 2
        assert summary["informative_groups"] == [2.0 if refill_groups else 1.0]
        m = store.metrics()[0]
        assert {t.task_id for t in store.trajectories(0, "train")} == want
        if refill_groups:
            assert rollouts.asked == [["b", "a"], ["s2"]]
            assert (m["groups/zero_variance_before_refill"], m["groups/refilled"], m["groups/refill_extra"]) == (
                1,
                1,
                1,
            )
            assert (m["groups/informative"], m["groups/zero_variance"]) == (2.0, 0.0)
        else:
            assert rollouts.asked == [["b", "a"]] and "groups/refilled" not in m
            assert (m["groups/informative"], m["groups/zero_variance"], m["tasks/distinct"]) == (1.0, 1.0, 2.0)
        store.close()
