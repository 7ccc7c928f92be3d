"""Evolving-RL's stages (navigating/evolving_stage.py): (B) the source, extractor and solver rollouts with their
groups, seeds, roles and skill rewards; (C) the best valid skill per source; (D) the extractor's and solver's GRPO
groups with Eq. 6's weights and Eq. 3's entropy coefficient. Stand-ins for the LLM, the rollouts and the store."""

from __future__ import annotations

import numpy as np
import pytest

import evolvekit.navigating.evolving_stage as stage_mod
from evolvekit.agent.rollout_stage import RolloutSettings
from evolvekit.config import EvolvingRLConfig, load_config
from evolvekit.engine.base import Engine
from evolvekit.llm.base import Completion, SamplingParams
from evolvekit.navigating.evolving_rl import extractor_advantages, group_reliability, solver_advantages
from evolvekit.navigating.evolving_stage import (
    EXTRACTOR_SYSTEM,
    EvolvingRLRollouts,
    EvolvingRLSamples,
    EvolvingRLSkills,
    evolving_rl_stages,
    extractor_messages,
)
from evolvekit.navigating.extract import render_trajectory
from evolvekit.protocols import IterationContext
from evolvekit.train.sample_stage import SampleSettings
from evolvekit.types import MAX_EXPERIENCE_CHARS, EvolvingRole, SpanKind, Step, Task, TokenSpan, Trajectory

TASKS = [Task(task_id=f"t{i}", env_name="x", query=q) for i, q in enumerate(["add", "sum", "sort"])]
VECS = {"add": [1.0, 0.0], "sum": [0.9, 0.1], "sort": [0.0, 1.0]}
SKILLS = ["When to use: adding\nContent: good call add", "When to use: never\nContent: bad", "\ufffd broken good"]


def embed(texts):
    return np.array([VECS[t] for t in texts], dtype=np.float32)


def _ctx(iteration=3, seed=11):
    return IterationContext(iteration=iteration, seed=seed, run_dir=None, store=None)  # type: ignore[arg-type]


def test_the_extractor_prompt_holds_every_turn_and_the_rendered_attempt():
    task = Task(task_id="m", env_name="x", query=["first", "second"])
    traj = Trajectory(task_id="m", steps=[Step(index=0, action_text="call", observation="ok")])
    system, user = extractor_messages(task, traj)
    assert (system.role, system.content) == ("system", EXTRACTOR_SYSTEM)
    assert user.content == f"Task:\nfirst\nsecond\n\nAttempt:\n{render_trajectory(traj)}\n\nWrite one skill."


class _LLM:
    name = "stand-in"

    def __init__(self):
        self.generated = []

    def apply_chat_template(self, messages):
        return [len(m.content) for m in messages]

    def generate_ids(self, prompts, params):
        self.generated.append((prompts, params))
        return [
            [Completion(text=t, token_ids=[100 + s], logprobs=[-0.5 - s]) for s, t in enumerate(SKILLS[: params.n])]
        ]


class _Rollouts:
    """run_rollouts' stand-in: a solver with a skill that says "good" gets 1, any other 0; a source episode 0.5."""

    def __init__(self):
        self.calls = []

    def __call__(self, jobs, make_env, engine, rc, params, rendering, show_progress, template=None):
        self.calls.append((list(jobs), make_env, engine, rc, params, rendering, show_progress, template))
        out = []
        for j in jobs:
            reward = 0.5 if j.experience is None else (1.0 if "good" in j.experience else 0.0)
            out.append(Trajectory(task_id=j.task.task_id, group_id=j.group_id, outcome_reward=reward))
        return out


def test_stage_b_rolls_out_sources_skills_and_their_solvers_with_distinct_groups_seeds_and_roles(monkeypatch):
    rec = _Rollouts()
    monkeypatch.setattr(stage_mod, "run_rollouts", rec)
    llm, make_env, template, reads = _LLM(), object(), object(), []

    def candidates():
        reads.append(1)
        return TASKS

    params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=33, stop=("</s>",), seed=99)
    evolving = EvolvingRLConfig(n_candidates=3, k_tasks=2, skill_max_tokens=16)
    settings = RolloutSettings(rendering="json")
    stage = EvolvingRLRollouts(evolving, settings, Engine(llm), make_env, params, candidates, embed, template)
    assert stage.last_metrics == {}
    out = stage.rollout(_ctx(), TASKS[:2])
    assert reads == [1]  # the related-task pool is read once
    src_call, sol0, sol1 = rec.calls
    jobs, env, engine, rc, p, rendering, progress, tmpl = src_call
    assert [(j.task.task_id, j.group_id, j.experience) for j in jobs] == [
        ("t0", "it0003-src-0", None),
        ("t1", "it0003-src-1", None),
    ]
    assert (env, engine, rc, rendering, progress, tmpl) == (
        make_env,
        stage.engine,
        settings.rollout,
        "json",
        False,
        template,
    )
    assert stage.engine.llm is llm
    same = dict(n=1, temperature=0.7, top_p=0.9, max_new_tokens=33, stop=("</s>",))
    assert p == SamplingParams(**same, seed=11)
    assert sol0[4] == SamplingParams(**same, seed=11 + 2000) and sol1[4] == SamplingParams(**same, seed=11 + 2001)
    assert all(
        c[1:4] == (make_env, stage.engine, settings.rollout) and c[5:] == ("json", False, template) for c in rec.calls
    )
    # the extractor: N samples at temperature 1 after the source episode, per source its own seed
    for i, (prompts, gp) in enumerate(llm.generated):
        src = out[i * 10]
        assert prompts == [llm.apply_chat_template(extractor_messages(TASKS[i], src))]
        assert gp == SamplingParams(n=3, temperature=1.0, max_new_tokens=16, seed=11 + 1000 + i)
    related = {0: ["t0", "t1"], 1: ["t1", "t0"]}  # the source, then the most similar description
    assert [(j.task.task_id, j.group_id, j.experience) for j in sol0[0]] == [
        (related[0][k], f"it0003-sol-0-{k}", SKILLS[s]) for s in range(3) for k in range(2)
    ]
    assert [j.group_id for j in sol1[0]][:2] == ["it0003-sol-1-0", "it0003-sol-1-1"]
    assert len(out) == 2 * (1 + 3 + 6)
    for i in range(2):
        src, exts, sols = out[i * 10], out[i * 10 + 1 : i * 10 + 4], out[i * 10 + 4 : i * 10 + 10]
        assert src.evolving == EvolvingRole(role="source", source=i)
        for s, ext in enumerate(exts):
            assert (ext.task_id, ext.group_id) == (f"t{i}", f"it0003-ext-{i}")
            step = ext.steps[0]
            assert (step.index, step.action_text, step.completion_token_ids, step.completion_logprobs) == (
                0, SKILLS[s], [100 + s], [-0.5 - s],
            )  # fmt: skip
            assert step.prompt_token_ids == llm.generated[i][0][0]
            assert ext.evolving == EvolvingRole(
                role="extractor", source=i, skill=s, abnormal=(s == 2), related=related[i]
            )
        assert [t.evolving for t in sols] == [
            EvolvingRole(role="solver", source=i, skill=s, task_index=k) for s in range(3) for k in range(2)
        ]
        # Eq. 2: a skill's reward is its mean downstream reward; the malformed one's is 0 (its solvers scored 1)
        assert [e.rewards.skill_utility for e in exts] == [1.0, 0.0, 0.0]
    one = EvolvingRLRollouts(
        EvolvingRLConfig(n_candidates=1, k_tasks=1), settings, Engine(llm), make_env, params, candidates, embed
    )
    assert one.rollout(_ctx(), TASKS[:1])[1].rewards.skill_utility == 1.0  # K = 1: the one downstream reward


# a span of the prompt marked as inserted experience: Evolving-RL keeps it (the skill is the solver's condition)
SPAN = [TokenSpan(start=0, end=1, kind=SpanKind.EXPERIENCE)]


def _ext(source, skill, reward, text, abnormal=False, task_id="t0"):
    return Trajectory(
        task_id=task_id,
        outcome_reward=reward,
        steps=[Step(index=0, action_text=text, prompt_token_ids=[1, 2], completion_token_ids=[3, 4], spans=SPAN)],
        evolving=EvolvingRole(role="extractor", source=source, skill=skill, abnormal=abnormal),
    )


def _sol(source, skill, k, reward):
    step = Step(index=0, action_text="s", prompt_token_ids=[5, 9], completion_token_ids=[6, 7, 8], spans=SPAN)
    return Trajectory(
        task_id=f"t{k}",
        outcome_reward=reward,
        steps=[step],
        evolving=EvolvingRole(role="solver", source=source, skill=skill, task_index=k),
        flags={"experience_guided": True},
    )


class _Store:
    def __init__(self):
        self.calls = []

    def put_experiences(self, c, skills, iteration):
        self.calls.append((c, list(skills), iteration))


def test_stage_c_keeps_the_best_valid_skill_of_each_source_parsed_into_its_fields():
    long = "x" * (MAX_EXPERIENCE_CHARS + 50)
    trajs = [
        _ext(0, 0, 1.0, "When to use: a\nContent: b", abnormal=True),  # source 0: only malformed skills
        _ext(1, 0, 0.2, "When to use: low\nContent: weak", task_id="t1"),
        _ext(1, 1, 0.9, "  When to use: adding\nContent: call add  ", task_id="t1"),
        _ext(1, 2, 0.9, "When to use: tie\nContent: later", task_id="t1"),  # a tie: the first stays
        _ext(2, 0, 0.4, "no fields at all", task_id="t2"),
        _ext(3, 0, 0.1, "Content: " + long, task_id="t3"),
        _ext(4, 0, None, "When to use: unscored\nContent: never best", task_id="t4"),  # no reward counts as 0
        _ext(4, 1, 0.05, "When to use: w\nContent: x Content: y", task_id="t4"),  # the first marker splits
        _ext(5, 0, None, "When to use: alone\nContent: z", task_id="t5"),
        _sol(1, 1, 0, 1.0),
    ]
    skills_stage = EvolvingRLSkills()
    assert skills_stage.skills == []
    store, conn = _Store(), object()
    skills_stage.commit(conn, store, 6)  # before any processing: nothing to store
    assert store.calls == [(conn, [], 6)]
    store.calls.clear()
    metrics = skills_stage.process(_ctx(iteration=7), trajs)
    assert metrics == {"evolving/skills_kept": 5.0}
    add, bare, capped, split, alone = skills_stage.skills
    assert (split.when_to_use, split.content, split.utility) == ("w", "x Content: y", 0.05)
    assert (alone.content, alone.utility) == ("z", 0.0)
    assert (add.when_to_use, add.content, add.utility) == ("adding", "call add", 0.9)
    assert add.provenance.kind == "skill" and add.provenance.iteration == 7
    assert (add.provenance.trajectory_ids, add.provenance.task_ids) == ([trajs[2].trajectory_id], ["t1"])
    assert add.experience_id.startswith("skill")
    assert (bare.when_to_use, bare.content, bare.utility) == ("no fields at all", "no fields at all", 0.4)
    assert capped.when_to_use == ("Content: " + long)[:200] and capped.content == long[:MAX_EXPERIENCE_CHARS]
    skills_stage.commit(conn, store, 7)
    assert store.calls == [(conn, skills_stage.skills, 7)]
    assert skills_stage.process(_ctx(), []) == {"evolving/skills_kept": 0.0} and skills_stage.skills == []


def _batch():
    # source 0: skills 0 (valid) and 1 (malformed), two tasks; given out of order. source 1: one skill, one task
    r0 = [[1.0, 0.5], [1.0, 1.0]]
    trajs = [_ext(0, 1, 0.0, "m", abnormal=True), _ext(0, 0, 0.75, "ok")]
    trajs += [_sol(0, s, k, r0[s][k]) for s in range(2) for k in range(2)]
    trajs += [_ext(1, 0, 0.25, "one", task_id="t1"), _ext(1, 1, 0.5, "two", task_id="t1")]
    trajs += [_sol(1, 0, 0, 0.0), _sol(1, 1, 0, 1.0)]
    trajs.append(Trajectory(task_id="t0", outcome_reward=0.3, evolving=EvolvingRole(role="source", source=0)))
    return trajs, r0, [[0.0], [1.0]]


def _policy(sample):
    return [a for a, m in zip(sample.token_advantages, sample.loss_mask) if m]


def test_stage_d_builds_both_groups_with_eq_6_weights_and_eq_3_entropy():
    trajs, r0, r1 = _batch()
    evolving = EvolvingRLConfig(lambda_e=0.2, lambda_s=0.7, entropy_coef=-0.03)
    settings = SampleSettings(eps_norm=0.5, max_sequence_tokens=4096)
    samples, m = EvolvingRLSamples(evolving, settings).build(_ctx(), trajs)
    ext = [s for s in samples if s.loss_group == "extractor"]
    sol = [s for s in samples if s.loss_group == "solver"]
    assert len(ext) == 4 and len(sol) == 6 and len(samples) == 10
    assert all(s.loss_weight == 0.2 and s.entropy_coef == -0.03 for s in ext)
    assert all(s.loss_weight == 0.7 and s.entropy_coef == 0.0 and not s.experience_guided for s in sol)
    assert all(s.token_ids[:2] in ([1, 2], [5, 9]) for s in samples)  # the experience token is not stripped
    # extractor: one group per source, the skills in skill order, the malformed skill's reward zeroed
    want_e = extractor_advantages(r0, [True, False], 0.5) + extractor_advantages(r1, [True, True], 0.5)
    assert [_policy(s) for s in ext] == [[pytest.approx(a)] * 2 for a in want_e]
    assert want_e[0] > 0 > want_e[1] and want_e[2] < 0 < want_e[3]
    # solver: per downstream task, across the skills
    a0, a1 = solver_advantages(r0, 0.5), solver_advantages(r1, 0.5)
    want_s = [a0[s][k] for s in range(2) for k in range(2)] + [a1[0][0], a1[1][0]]
    assert [_policy(s) for s in sol] == [[pytest.approx(a)] * 3 for a in want_s]
    assert want_s[1] < 0 < want_s[3]  # the task where the skills differed
    rel0, rel1 = group_reliability(r0), group_reliability(r1)
    assert m == {
        "evolving/extractor_reward": pytest.approx((0.0 + 0.75 + 0.25 + 0.5) / 4),
        "evolving/solver_reward": pytest.approx((1.0 + 0.5 + 1.0 + 1.0 + 0.0 + 1.0) / 6),
        "evolving/sources": 2.0,
        "evolving/skill_reward_spread": pytest.approx((rel0["spread"] + rel1["spread"]) / 2),
        "evolving/ordering_bound": pytest.approx((rel0["ordering_bound"] + rel1["ordering_bound"]) / 2),
        "evolving/abnormal_skills": 1.0,
        "evolving/samples": 10.0,
    }
    assert rel0["spread"] != rel1["spread"]


def test_stage_d_reads_a_missing_solver_as_reward_0_and_a_source_without_solvers_as_k_0():
    trajs = [_ext(0, 0, 1.0, "a"), _ext(0, 1, 0.0, "b"), _sol(0, 0, 0, 1.0), _sol(0, 0, 1, 1.0), _sol(0, 1, 1, 1.0)]
    trajs += [_ext(1, 0, 0.5, "c", task_id="t1"), _ext(1, 1, 0.0, "d", task_id="t1")]  # no solver ran
    samples, m = EvolvingRLSamples(EvolvingRLConfig(), SampleSettings()).build(_ctx(), trajs)
    r0 = [[1.0, 1.0], [0.0, 1.0]]  # skill 1's solver of task 0 is missing: 0
    ext0 = [s for s in samples if s.loss_group == "extractor"][:2]
    assert [_policy(s)[0] for s in ext0] == pytest.approx(extractor_advantages(r0, [True, True]))
    assert m["evolving/ordering_bound"] == pytest.approx(group_reliability(r0)["ordering_bound"] / 2)
    single = [_ext(0, 0, 0.25, "a"), _sol(0, 0, 0, 0.75)]
    _, m1 = EvolvingRLSamples(EvolvingRLConfig(), SampleSettings()).build(_ctx(), single)
    assert (m1["evolving/extractor_reward"], m1["evolving/solver_reward"]) == (0.25, 0.75)


def test_stage_d_follows_table_3s_ablations_and_the_length_cap():
    trajs, _, _ = _batch()
    settings = SampleSettings(max_sequence_tokens=4096)
    solver_only, _ = EvolvingRLSamples(EvolvingRLConfig(mode="solver_only"), settings).build(_ctx(), trajs)
    assert {s.loss_group for s in solver_only} == {"solver"} and len(solver_only) == 6
    extractor_only, _ = EvolvingRLSamples(EvolvingRLConfig(mode="extractor_only"), settings).build(_ctx(), trajs)
    assert {s.loss_group for s in extractor_only} == {"extractor"} and len(extractor_only) == 4
    short, _ = EvolvingRLSamples(EvolvingRLConfig(), SampleSettings(max_sequence_tokens=3)).build(_ctx(), trajs)
    assert all(len(s.token_ids) <= 3 for s in short)
    empty, m = EvolvingRLSamples(EvolvingRLConfig(), settings).build(_ctx(), [])
    assert empty == [] and m["evolving/sources"] == 0.0 and m["evolving/skill_reward_spread"] == 0.0


def test_the_three_stages_are_built_from_one_config():
    cfg = load_config(None, ["evolving_rl.n_candidates=5", "evolving_rl.lambda_e=0.4", "train.eps_norm=0.01"])
    params = SamplingParams(seed=4)
    engine = Engine(_LLM())
    b, c, d = evolving_rl_stages(cfg, engine, "env", params, lambda: TASKS, embed, "tmpl")
    assert b.evolving == cfg.evolving_rl and b.settings == RolloutSettings.of(cfg) and b.engine is engine
    assert b.params is params
    assert (b.make_env, b.embed, b.template, b.candidates()) == ("env", embed, "tmpl", TASKS)
    assert isinstance(c, EvolvingRLSkills) and d.evolving == cfg.evolving_rl and d.settings == SampleSettings.of(cfg)
