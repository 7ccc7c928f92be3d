"""Self-navigating's stages (navigating/stage.py) with recording stand-ins for the pool, the extractor, the refiner
and the rollout runner: what each stage reads of its settings, the jobs and seeds it runs (Eq. 13's cold start,
Eq. 15's guided share), what it adds, counts and prunes, and every metric it reports, checked by hand."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from conftest import TaskIndexStore

from evolvekit.agent.rollout_stage import RolloutSettings
from evolvekit.config import Config, load_config, paper_departures, paper_values
from evolvekit.engine.base import Engine
from evolvekit.llm.base import SamplingParams
from evolvekit.navigating.extract import ExtractionReport
from evolvekit.navigating.stage import (
    ExperienceMixedRollouts,
    ExperienceSummarisation,
    NavigationSettings,
    guided_vs_vanilla,
)
from evolvekit.protocols import IterationContext
from evolvekit.types import Experience, ExperienceProvenance, Task, Trajectory, TrajectoryFlags


def _exp(eid: str, when: str = "when adding", content: str = "call add") -> Experience:
    return Experience(
        experience_id=eid, when_to_use=when, content=content, provenance=ExperienceProvenance(trajectory_ids=["t"])
    )


@dataclass
class _Added:
    action: str


@dataclass
class _Pool:
    """A recording stand-in for ExperiencePool: scripted retrievals and add results."""

    hits: list = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    items: list = field(default_factory=list)
    vectors: object = "vectors"
    calls: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.items)

    def retrieve(self, query, k):
        self.calls.append(("retrieve", query, k))
        return self.hits

    def add(self, exp):
        self.calls.append(("add", exp.experience_id))
        self.items.append(exp)
        return _Added(self.actions.pop(0) if self.actions else "added")

    def record_use(self, ids, success):
        self.calls.append(("use", tuple(ids), success))

    def prune(self, theta, min_uses):
        self.calls.append(("prune", theta, min_uses))
        return list(self.pruned)


class _Extractor:
    def __init__(self, report: ExtractionReport) -> None:
        self.report, self.calls = report, []

    def extract(self, trajectories, tasks, iteration):
        self.calls.append((list(trajectories), tasks, iteration))
        return self.report


def _cfg(**nav) -> Config:
    cfg = Config()
    cfg.rollout.group_size = 4
    for k, v in nav.items():
        setattr(cfg.navigating, k, v)
    return cfg


def _mixed(cfg, pool, extractor=None, training_set=None, refiner=None):
    stage = ExperienceMixedRollouts(
        Engine(None), None, RolloutSettings.of(cfg), NavigationSettings.of(cfg), SamplingParams(temperature=0.9), pool,
        refiner, SamplingParams(), show_progress=False, training_set=training_set, cold_extractor=extractor,
    )  # fmt: skip
    ran: list = []

    def run_jobs(jobs, params):
        ran.append((list(jobs), params))
        return [
            Trajectory(
                task_id=j.task.task_id, group_id=j.group_id, flags=TrajectoryFlags(experience_guided=bool(j.experience))
            )
            for j in jobs
        ]

    stage.run_jobs = run_jobs  # type: ignore[method-assign]
    return stage, ran


def _ctx(iteration=2, seed=11, store=None):
    return IterationContext(iteration=iteration, seed=seed, run_dir=None, store=store)  # type: ignore[arg-type]


def test_settings_read_the_navigating_section_group_seed_threshold_and_the_cold_start_fallback():
    cfg = _cfg(cold_start_tasks=0)
    cfg.rollout.group_size, cfg.run.seed, cfg.reward.success_threshold = 6, 17, 0.25
    cfg.train.tasks_per_iteration = 3
    s = NavigationSettings.of(cfg)
    assert (s.navigating, s.group_size, s.cold_start_tasks, s.seed, s.success_threshold) == (
        cfg.navigating, 6, 3, 17, 0.25,
    )  # fmt: skip
    cfg.navigating.cold_start_tasks = 9
    assert NavigationSettings.of(cfg).cold_start_tasks == 9


def test_the_injected_experience_is_the_refined_top_k_joined_with_its_ids(monkeypatch):
    import evolvekit.navigating.stage as stage_mod

    a, b = _exp("a", content="first"), _exp("b", content="second")
    pool = _Pool(hits=[(a, 0.9), (b, 0.8)])
    cfg = _cfg(top_k=7, inject_count=2, rerank=False, rewrite=True)
    seen = []

    def refine(llm, params, query, retrieved, rerank, rewrite, keep=1):
        seen.append((llm, params, query, retrieved, rerank, rewrite, keep))
        return [(b, "text b"), (a, "text a")]

    monkeypatch.setattr(stage_mod, "refine", refine)
    refiner = object()
    stage, _ = _mixed(cfg, pool, refiner=refiner)
    text, ids = stage._experience_for(Task(task_id="t", env_name="bfcl", query=["add 1 and 2", "then 3"]))
    assert pool.calls == [("retrieve", "add 1 and 2\nthen 3", 7)]
    assert seen == [(refiner, stage.refine_params, "add 1 and 2\nthen 3", [a, b], False, True, 2)]
    assert (text, ids) == ("text b\n\ntext a", ("b", "a"))
    assert _mixed(cfg, _Pool())[0]._experience_for(Task(task_id="t", env_name="bfcl", query="q")) == (None, ())


def test_guided_rollouts_are_the_first_eta_n_of_each_group_with_the_iterations_seed(monkeypatch):
    import evolvekit.navigating.stage as stage_mod

    monkeypatch.setattr(stage_mod, "refine", lambda *a, **k: [(_exp("e1"), "use add")])
    pool = _Pool(hits=[(_exp("e1"), 1.0)], items=[_exp("old")])  # a pool that is not empty: no cold start
    stage, ran = _mixed(_cfg(eta=0.5), pool, extractor=_Extractor(ExtractionReport()))
    stage.cold_metrics = {"stale": 1.0}
    tasks = [Task(task_id="x", env_name="bfcl", query="q1"), Task(task_id="y", env_name="bfcl", query="q2")]
    trajs = stage.rollout(_ctx(iteration=3, seed=11), tasks)
    (jobs, params), = ran  # fmt: skip
    assert [j.group_id for j in jobs] == ["it0003-g000-x"] * 4 + ["it0003-g001-y"] * 4
    assert [j.experience for j in jobs] == ["use add", "use add", None, None] * 2
    assert [j.experience_ids for j in jobs] == [("e1",), ("e1",), (), ()] * 2
    assert (params.seed, params.n, params.temperature) == (11, 1, 0.9)
    assert len(trajs) == 8 and stage.last_metrics == {"navigating/cold_start_rollouts": 0.0}
    assert stage.cold_metrics == {}


@pytest.mark.parametrize("sets", [{"as_tool": True}, {"eta": 0.0}])
def test_no_guided_rollout_and_no_retrieval_with_the_search_tool_or_eta_0(sets):
    pool = _Pool(hits=[(_exp("e1"), 1.0)], items=[_exp("old")])
    stage, ran = _mixed(_cfg(**sets), pool)
    stage.rollout(_ctx(), [Task(task_id="x", env_name="bfcl", query="q")])
    assert [j.experience for j in ran[0][0]] == [None] * 4 and not any(c[0] == "retrieve" for c in pool.calls)


def test_the_cold_start_runs_n_pc_rollouts_per_sampled_task_and_fills_the_empty_pool():
    """Eq. 13: with an empty pool, N_pc rollouts of the initial policy per task sampled from p_train (the run's seed
    × 7919 + 13), seed ctx.seed + 7, then the extractor's experiences go into the pool; its metrics by hand."""
    import random

    train = [Task(task_id=f"t{i}", env_name="bfcl", query=f"task {i}") for i in range(10)]
    report = ExtractionReport(experiences=[_exp("n1"), _exp("n2")], jobs=4, validated_jobs=3)
    extractor = _Extractor(report)
    cfg = _cfg(n_pc=3, cold_start_tasks=2, eta=0.0)
    cfg.run.seed = 5
    pool = _Pool()
    stage, ran = _mixed(cfg, pool, extractor=extractor, training_set=lambda: train)
    stage.rollout(_ctx(iteration=0, seed=20), train[:1])
    chosen = random.Random(5 * 7919 + 13).sample(train, 2)
    (cold_jobs, cold_params), (jobs, params) = ran
    assert [j.group_id for j in cold_jobs] == [
        f"coldstart-{i}-{t.task_id}" for i, t in enumerate(chosen) for _ in range(3)
    ]
    assert all(j.experience is None for j in cold_jobs) and (cold_params.seed, params.seed) == (27, 20)
    (got, tasks, iteration), = extractor.calls  # fmt: skip
    assert [t.group_id for t in got] == [j.group_id for j in cold_jobs]  # the cold rollouts, not the group's
    assert tasks == {t.task_id: t for t in chosen} and iteration == 0
    assert [c for c in pool.calls if c[0] == "add"] == [("add", "n1"), ("add", "n2")]
    assert stage.last_metrics == {
        "navigating/cold_start_rollouts": 6.0,
        "navigating/cold_start_extraction_jobs": 4.0,
        "navigating/cold_start_validated_share": 0.75,
        "navigating/cold_start_experiences": 2.0,
    }
    assert len(jobs) == 4  # then the iteration's own group


@pytest.mark.parametrize("case", ["pool not empty", "n_pc 0", "no extractor"])
def test_no_cold_start_with_a_pool_without_n_pc_or_without_an_extractor(case):
    pool = _Pool(items=[_exp("old")] if case == "pool not empty" else [])
    extractor = None if case == "no extractor" else _Extractor(ExtractionReport())
    stage, ran = _mixed(_cfg(n_pc=0 if case == "n_pc 0" else 2, eta=0.0), pool, extractor=extractor)
    assert stage.cold_start(_ctx(), [Task(task_id="x", env_name="bfcl", query="q")]) == 0
    assert ran == [] and stage.cold_metrics == {}


def test_the_cold_start_falls_back_to_this_iterations_tasks_and_reads_the_training_set_once():
    calls = []

    def training_set():
        calls.append(1)
        return []

    stage, _ = _mixed(_cfg(cold_start_tasks=5), _Pool(), training_set=training_set)
    batch = [Task(task_id=f"b{i}", env_name="bfcl", query=f"b {i}") for i in range(3)]
    assert sorted(t.task_id for t in stage.cold_start_tasks(1, batch)) == ["b0", "b1", "b2"]
    stage.cold_start_tasks(2, batch)
    assert calls == [1]


def test_without_a_training_set_the_cold_start_samples_this_iterations_tasks():
    extractor = _Extractor(ExtractionReport())
    stage, ran = _mixed(_cfg(n_pc=1, cold_start_tasks=2, eta=0.0), _Pool(), extractor=extractor)
    batch = [Task(task_id=f"b{i}", env_name="bfcl", query=f"b {i}") for i in range(3)]
    stage.rollout(_ctx(iteration=0), batch)
    assert len(ran[0][0]) == 2 and {j.task.task_id for j in ran[0][0]} <= {"b0", "b1", "b2"}
    assert set(extractor.calls[0][1]) == {j.task.task_id for j in ran[0][0]}


def _traj(tid, reward, guided=False, failed=False, used=(), group="g"):
    return Trajectory(
        task_id=tid, group_id=group, outcome_reward=reward, experience_used=list(used),
        flags=TrajectoryFlags(experience_guided=guided, failed=failed),
    )  # fmt: skip


def test_guided_vs_vanilla_by_hand():
    trajs = [
        _traj("a", 1.0, guided=True, group="g1"),
        _traj("a", 0.0, guided=True, group="g1"),
        _traj("b", 0.5, guided=True, group="g2"),
        _traj("a", 0.25, group="g1"),
        _traj("c", None, group="g3"),  # type: ignore[arg-type]
    ]
    assert guided_vs_vanilla(trajs) == {
        "navigating/guided_rollouts": 3.0,
        "navigating/vanilla_rollouts": 2.0,
        "navigating/retrievals": 2.0,
        "navigating/guided_reward": 0.5,
        "navigating/vanilla_reward": 0.125,
    }
    only_vanilla = guided_vs_vanilla([_traj("a", 1.0)])
    assert "navigating/guided_reward" not in only_vanilla and only_vanilla["navigating/retrievals"] == 0.0
    assert "navigating/vanilla_reward" not in guided_vs_vanilla([_traj("a", 1.0, guided=True)])


def _summarise(cfg, pool, report, utility=None):
    extractor = _Extractor(report)
    return ExperienceSummarisation(NavigationSettings.of(cfg), pool, extractor, utility), extractor  # type: ignore[arg-type]


def test_summarisation_counts_uses_adds_merges_prunes_and_reports_every_figure():
    cfg = _cfg(prune_every=3, theta_prune=0.4, min_uses_before_prune=6, online_extraction=True)
    cfg.reward.success_threshold = 0.5
    pool = _Pool(actions=["added", "merged", "added"], pruned=["p1"], items=[_exp("old")])
    report = ExtractionReport(
        experiences=[_exp("n1"), _exp("n2"), _exp("n3")], calls=5, unparseable=1, rejected=2, jobs=4,
        validated_jobs=1, grounded=3, closed_failures=1, prompt_tokens=100, completion_tokens=40,
    )  # fmt: skip
    stage, extractor = _summarise(cfg, pool, report)
    tasks = {"a": Task(task_id="a", env_name="bfcl", query="q")}
    trajs = [
        _traj("a", 1.0, guided=True, used=["e1"]),
        _traj("a", 0.25, guided=True, used=["e1"]),
        _traj("a", 1.0, guided=True, failed=True, used=["e1"]),  # a crashed rollout counts no use
        _traj("a", 1.0),  # no experience: nothing recorded
    ]
    m = stage.process(_ctx(iteration=2, store=TaskIndexStore(tasks)), trajs)
    uses = [c for c in pool.calls if c[0] == "use"]
    assert uses == [("use", ("e1",), True), ("use", ("e1",), False)]
    assert extractor.calls == [(trajs, tasks, 2)]
    assert ("prune", 0.4, 6) in pool.calls
    assert m == {
        **guided_vs_vanilla(trajs),
        "navigating/pool_size": 4.0,
        "navigating/added": 2.0,
        "navigating/merged": 1.0,
        "navigating/pruned": 1.0,
        "navigating/extraction_calls": 5.0,
        "navigating/extraction_prompt_tokens": 100.0,
        "navigating/extraction_completion_tokens": 40.0,
        "navigating/unparseable": 1.0,
        "navigating/extraction_jobs": 4.0,
        "navigating/validated_share": 0.25,
        "navigating/grounded_experiences": 3.0,
        "navigating/closed_failures": 1.0,
        "navigating/rejected": 2.0,
        "navigating/utility_dropped": 0.0,
    }


def test_without_online_extraction_the_pool_only_counts_uses_as_agentevolver_builds_it_offline():
    """navigating.online_extraction: false (AgentEvolver §4.1, Eq. 13): no extraction, no add or merge, no pruning
    sweep; the uses of the experiences that guided a rollout are still counted."""
    cfg = _cfg(prune_every=1, online_extraction=False)
    pool = _Pool(actions=["added"], pruned=["p1"], items=[_exp("old")])
    stage, extractor = _summarise(cfg, pool, ExtractionReport(experiences=[_exp("n1")], calls=1))
    trajs = [_traj("a", 1.0, guided=True, used=["e1"])]
    m = stage.process(_ctx(iteration=0, store=TaskIndexStore({})), trajs)
    assert extractor.calls == [] and [c[0] for c in pool.calls] == ["use"]
    assert m == {**guided_vs_vanilla(trajs), "navigating/pool_size": 1.0} and stage._pruned == []
    on = load_config(None, ["navigating.enabled=true"])
    assert on.navigating.online_extraction is True  # the default: EvolveR's lifecycle, as every earlier run
    assert paper_values(on)["navigating.online_extraction"][0] is False  # marked ≠ paper in AgentEvolver's mode
    evolver = load_config(None, ["navigating.enabled=true", "navigating.as_tool=true"])
    assert "navigating.online_extraction" not in paper_departures(evolver)


@pytest.mark.parametrize("iteration, prune_every, prunes", [(1, 3, False), (2, 3, True), (5, 3, True), (2, 0, False)])
def test_the_pruning_sweep_runs_every_prune_every_iterations(iteration, prune_every, prunes):
    pool = _Pool(pruned=["p1"])
    stage, _ = _summarise(_cfg(prune_every=prune_every, online_extraction=True), pool, ExtractionReport())
    m = stage.process(_ctx(iteration=iteration, store=TaskIndexStore()), [])
    assert any(c[0] == "prune" for c in pool.calls) is prunes and m["navigating/pruned"] == float(prunes)
    assert stage._pruned == (["p1"] if prunes else [])


def test_the_utility_test_keeps_only_the_experiences_it_approves():
    class _Utility:
        def __init__(self):
            self.calls = []

        def test(self, experiences, tasks, candidates, vanilla):
            self.calls.append((list(experiences), tasks, candidates, list(vanilla)))
            return [(e, 0.0, e.experience_id == "keep") for e in experiences]

    pool = _Pool()
    utility = _Utility()
    tasks = {"a": Task(task_id="a", env_name="bfcl", query="q")}
    new = [_exp("drop1"), _exp("keep"), _exp("drop2")]
    stage, _ = _summarise(_cfg(prune_every=0, online_extraction=True), pool, ExtractionReport(experiences=new), utility)
    trajs = [_traj("a", 1.0)]
    m = stage.process(_ctx(store=TaskIndexStore(tasks)), trajs)
    assert utility.calls == [(new, tasks, list(tasks.values()), trajs)]
    assert [c for c in pool.calls if c[0] == "add"] == [("add", "keep")]
    assert (m["navigating/utility_dropped"], m["navigating/added"]) == (2.0, 1.0)
    utility.calls.clear()
    _summarise(_cfg(prune_every=0, online_extraction=True), _Pool(), ExtractionReport(), utility)[0].process(
        _ctx(store=TaskIndexStore()), trajs
    )
    assert utility.calls == []  # nothing to test


def test_commit_deletes_the_pruned_and_writes_the_pool_with_its_vectors():
    class _RunStore:
        def __init__(self):
            self.calls = []

        def delete_experiences(self, c, ids):
            self.calls.append(("delete", c, list(ids)))

        def put_experiences(self, c, items, iteration, vectors):
            self.calls.append(("put", c, list(items), iteration, vectors))

    pool = _Pool(pruned=["p1", "p2"], items=[_exp("kept")])
    stage, _ = _summarise(_cfg(prune_every=1, online_extraction=True), pool, ExtractionReport())
    before = _RunStore()
    stage.commit("conn", before, 0)  # type: ignore[arg-type]
    assert before.calls[0] == ("delete", "conn", [])  # nothing pruned before the first sweep
    stage.process(_ctx(iteration=0, store=TaskIndexStore()), [])
    store = _RunStore()
    stage.commit("conn", store, 4)  # type: ignore[arg-type]
    assert store.calls == [("delete", "conn", ["p1", "p2"]), ("put", "conn", pool.items, 4, "vectors")]


def test_the_mixed_stage_hands_its_rollout_settings_template_and_workers_to_the_episodes(monkeypatch):
    """ExperienceMixedRollouts is VanillaRollouts with experience: its jobs run with the rollout section, rendering,
    progress switch and context template it was given, or on the Ray workers it was given."""
    import evolvekit.agent.rollout_stage as rollout_stage
    from evolvekit.agent.rollout_stage import RolloutJob

    cfg = _cfg()
    settings, template, seen = RolloutSettings.of(cfg), object(), []

    def run_rollouts(jobs, make_env, engine, rollout, params, rendering, show_progress, template):
        seen.append((rollout, rendering, show_progress, template))
        return [Trajectory(task_id=j.task.task_id, group_id=j.group_id) for j in jobs]

    monkeypatch.setattr(rollout_stage, "run_rollouts", run_rollouts)
    jobs = [RolloutJob(task=Task(task_id="t", env_name="e", query="q"), group_id="g")]

    def mixed(**kw):
        return ExperienceMixedRollouts(
            Engine(None), None, settings, NavigationSettings.of(cfg), SamplingParams(), _Pool(), None,
            SamplingParams(), **kw,
        )  # fmt: skip

    mixed(template=template).run_jobs(jobs, SamplingParams())
    mixed(show_progress=False).run_jobs(jobs, SamplingParams())
    assert seen == [
        (settings.rollout, settings.rendering, True, template),
        (settings.rollout, settings.rendering, False, None),
    ]

    class Workers:
        def __init__(self) -> None:
            self.ran: list = []

        def run(self, jobs, params):
            self.ran.append(list(jobs))
            return [Trajectory(task_id=j.task.task_id, group_id=j.group_id) for j in jobs]

    workers = Workers()
    mixed(workers=workers).run_jobs(jobs, SamplingParams())
    assert workers.ran == [jobs] and len(seen) == 2
