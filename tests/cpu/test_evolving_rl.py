"""Evolving-RL: Eq. 2/4 groupings by hand, the skill filter, Eq. 7-10 reliability, Table 3 weights, the joint
loss weighting, and one master-loop iteration with the co-evolution stages (tiny model, test environment)."""

import math
from pathlib import Path

import pytest
import torch

from evolvekit.navigating.evolving_rl import (
    abnormal_skill,
    extractor_advantages,
    gap_sigma,
    group_reliability,
    joint_weights,
    normal_cdf,
    ordering_lower_bound,
    ordering_probability,
    skill_rewards,
    solver_advantages,
)
from evolvekit.train.losses import policy_loss

R = [
    [1.0, 0.0, 1.0],  # skill 0
    [0.0, 0.0, 0.0],  # skill 1
    [1.0, 1.0, 1.0],
]  # skill 2


def test_skill_rewards_and_both_groupings_by_hand():
    assert skill_rewards(R) == pytest.approx([2 / 3, 0.0, 1.0])
    # extractor group: rewards 2/3, 0, 1 -> mean 5/9, unbiased std sqrt(((1/9)^2 + (5/9)^2 + (4/9)^2)/2)
    sd = math.sqrt(((1 / 9) ** 2 + (5 / 9) ** 2 + (4 / 9) ** 2) / 2)
    assert extractor_advantages(R, eps=0.0) == pytest.approx([(2 / 3 - 5 / 9) / sd, -5 / 9 / sd, 4 / 9 / sd])
    # a malformed skill is zeroed before normalising
    assert extractor_advantages(R, valid=[True, True, False], eps=0.0)[2] < 0
    # solver groups: one per downstream task (column); task 2 is degenerate only if all equal
    adv = solver_advantages(R, eps=0.0)
    col0 = [1.0, 0.0, 1.0]
    m, s = 2 / 3, math.sqrt(1 / 3)
    assert [adv[i][0] for i in range(3)] == pytest.approx([(x - m) / s for x in col0])
    assert [adv[i][1] for i in range(3)] == pytest.approx([-(1 / 3) / s, -(1 / 3) / s, (2 / 3) / s])


def test_abnormal_skill_filter():
    assert not abnormal_skill("When to use: adding numbers\nContent: call add(a, b) — then answer.")
    assert not abnormal_skill("Quand utiliser : fichiers, répertoires")
    assert abnormal_skill("call add \ufffd\ufffd")
    assert abnormal_skill("ok\x07")
    assert abnormal_skill("∑∑∑∑∑∑ ≈≈≈ ok")
    assert abnormal_skill("   ")


def test_reliability_equations():
    assert normal_cdf(0.0) == 0.5
    # Eq. 7: K = 2, v = 0.25 everywhere -> sigma^2 = (1/4) * 4 * 0.25 = 0.25
    assert gap_sigma([0.25, 0.25], [0.25, 0.25]) == pytest.approx(0.5)
    assert ordering_probability(0.5, 0.5) == pytest.approx(normal_cdf(1.0))
    # Eq. 10 with K = 4, range 1: Phi(0.25 * sqrt(8))
    assert ordering_lower_bound(0.25, 4) == pytest.approx(normal_cdf(0.25 * math.sqrt(8)))
    rel = group_reliability(R)
    assert rel["spread"] == pytest.approx(1.0)
    gaps = [1.0 - 2 / 3, 2 / 3]
    assert rel["ordering_bound"] == pytest.approx(sum(normal_cdf(g * math.sqrt(6)) for g in gaps) / 2)


def test_the_math_at_its_edges_and_defaults_by_hand():
    """Issue 53's rule (a mechanism test must fail when the mechanism breaks): the survivors of mutating this module
    at stop 70, each pinned by a hand-computed value."""
    from evolvekit.train.losses import group_advantages

    assert skill_rewards([[], [1.0, 0.0]]) == [0.0, 0.5]  # a skill tested on no task has reward 0
    # the default ε = 1e-6 (Eq. 3's GRPO normalisation), against the plain group computation
    assert extractor_advantages([[1.0], [0.0]]) == group_advantages([1.0, 0.0], ["g", "g"], 1e-6)
    assert solver_advantages([[1.0], [0.0]]) == [[a] for a in group_advantages([1.0, 0.0], ["g", "g"], 1e-6)]
    assert solver_advantages([]) == []
    # the skill filter: a tab/newline is skipped, not the end of the check; private-use, surrogate and unassigned
    # code points; non-ASCII letters are not symbols; the share of symbols is compared strictly
    assert abnormal_skill("ok\n\ufffd") and abnormal_skill("hello world \ue000")
    assert abnormal_skill("hello world \ud800") and abnormal_skill("hello world \u0378")
    assert not abnormal_skill("abcd") and not abnormal_skill("éééééé")
    assert not abnormal_skill("abcdefg→") and not abnormal_skill("abcd→")  # 1/8 and exactly 1/5 = 0.2
    assert abnormal_skill("abc→")  # 1/4 > 0.2
    assert normal_cdf(1.0) == pytest.approx(0.8413447460685429) and normal_cdf(-1.0) == pytest.approx(0.15865525393)
    # Eq. 8 with σ = 0: a positive gap is always ordered right, no gap (or a negative one) is a coin flip
    assert ordering_probability(0.5, 0.0) == 1.0 and ordering_probability(0.0, 0.0) == 0.5
    assert ordering_probability(-1.0, 0.0) == 0.5 and ordering_probability(1.0, -1.0) == 1.0
    assert gap_sigma([], []) == 0.0
    assert ordering_lower_bound(0.5, 2, reward_range=2.0) == pytest.approx(normal_cdf(0.5))  # 0.5·√4 / 2
    assert group_reliability([]) == {"spread": 0.0, "ordering_bound": 0.0}
    assert group_reliability([[], []]) == {"spread": 0.0, "ordering_bound": 0.0}  # K = 0: no bound
    rel = group_reliability([[1.0], [0.5]], reward_range=2.0)
    assert rel == {"spread": 0.5, "ordering_bound": pytest.approx(normal_cdf(0.5 * math.sqrt(2) / 2))}


def test_joint_weights_and_weighted_loss():
    assert joint_weights("both", 0.2, 1.0) == (0.2, 1.0)
    assert joint_weights("solver_only", 0.2, 1.0) == (0.0, 1.0)
    assert joint_weights("extractor_only", 0.2, 1.0) == (0.2, 0.0)
    logp = torch.zeros(2, 2)
    adv = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    mask = torch.ones(2, 2)
    loss, _ = policy_loss(
        logp, logp, adv, mask, torch.tensor([False, False]), eps_low=0.2, eps_high=0.2, weights=torch.tensor([0.2, 1.0])
    )
    assert loss.item() == pytest.approx(-(0.2 * 2 + 1.0 * 2) / 4)
    ent = torch.ones(2, 2)
    loss, _ = policy_loss(
        logp,
        logp,
        torch.zeros(2, 2),
        mask,
        torch.tensor([False, False]),
        eps_low=0.2,
        eps_high=0.2,
        entropy=ent,
        entropy_coef=torch.tensor([-0.03, 0.0]),
    )
    assert loss.item() == pytest.approx(0.03 * 2 / 4)  # only the extractor sample pays the entropy penalty


PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")


@pytest.mark.slow
def test_one_co_evolution_iteration(tmp_path, monkeypatch):
    from evolvekit.config import load_config
    from evolvekit.llm.tiny import make_tiny_model
    from evolvekit.orchestrator.build import build_loop
    from evolvekit.orchestrator.run_dir import open_run

    monkeypatch.syspath_prepend(PLUGINS)
    tiny = make_tiny_model(tmp_path / "tiny")
    cfg = load_config(
        None,
        [
            f"run.out_dir={tmp_path}",
            "env.name=coin",
            "env.plugins=[coin_env]",
            f"models.policy.model={tiny}",
            "models.policy.max_new_tokens=8",
            "rollout.max_steps=1",
            "train.iterations=1",
            "train.tasks_per_iteration=2",
            "train.eval_before=false",
            "train.eval_after=false",
            "train.autocast=off",
            "train.learning_rate=1e-3",
            "evolving_rl.enabled=true",
            "evolving_rl.n_candidates=3",
            "evolving_rl.k_tasks=2",
            "evolving_rl.skill_max_tokens=12",
        ],
    )
    cfg, run_dir, store = open_run(cfg, None)
    loop = build_loop(cfg, run_dir, store, show_progress=False)
    stage = loop.stages.samples
    # Evolving-RL's three stages are separate objects (B, C and the sample builder of D)
    assert len({id(loop.stages.rollouts), id(loop.stages.experience), id(stage)}) == 3
    captured = {}
    inner_build = stage.build

    def spy(ctx, trajs):
        samples, m = inner_build(ctx, trajs)
        captured["samples"] = samples
        return samples, m

    stage.build = spy
    loop.run()
    trajs = store.trajectories(0)
    roles = [t.evolving.role for t in trajs]
    assert roles.count("source") == 2 and roles.count("extractor") == 2 * 3 and roles.count("solver") == 2 * 3 * 2
    # extractor groups: one per source task; solver groups: one per (source, downstream task), N members each
    ext_groups = {t.group_id for t in trajs if t.evolving.role == "extractor"}
    sol_groups = {}
    for t in trajs:
        if t.evolving.role == "solver":
            sol_groups.setdefault(t.group_id, []).append(t.evolving.skill)
    assert len(ext_groups) == 2 and len(sol_groups) == 4 and all(sorted(v) == [0, 1, 2] for v in sol_groups.values())
    for t in trajs:  # Eq. 2: an extractor's reward is its skill's mean downstream reward
        if t.evolving.role == "extractor" and not t.evolving.abnormal:
            downstream = [
                s.outcome_reward
                for s in trajs
                if s.evolving.role == "solver"
                and s.evolving.source == t.evolving.source
                and s.evolving.skill == t.evolving.skill
            ]
            assert t.outcome_reward == pytest.approx(sum(downstream) / len(downstream))
    weights = sorted({s.loss_weight for s in captured["samples"]})
    assert weights == [0.2, 1.0]
    assert {s.entropy_coef for s in captured["samples"] if s.loss_weight == 0.2} == {-0.03}
    m = store.metrics()[0]
    assert {"evolving/skill_reward_spread", "evolving/ordering_bound", "evolving/skills_kept"} <= set(m)
    assert all(e.provenance.kind == "skill" and e.utility is not None for e in store.experiences())
    store.close()


@pytest.mark.slow
def test_co_evolution_run_offline_from_the_command_line(tmp_path, tiny_roles):
    """A co-evolution run from the command line reports the extractor's and the solver's rewards and trains both
    (its wiring; every role the tiny model)."""
    import json
    import subprocess
    import sys

    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "evolvekit.cli.main",
            "run",
            "configs/grpo.yaml",
            "--json",
            "--no-progress",
            "--set",
            f"run.out_dir={tmp_path}",
            "--set",
            "evolving_rl.enabled=true",
            "--set",
            "evolving_rl.n_candidates=2",
            "--set",
            "evolving_rl.k_tasks=2",
            "--set",
            "evolving_rl.skill_max_tokens=48",
            "--set",
            "train.iterations=1",
            "--set",
            "train.tasks_per_iteration=1",
            "--set",
            "train.eval_before=false",
            "--set",
            "train.eval_after=false",
            "--set",
            "rollout.max_steps=2",
            "--set",
            "models.policy.max_new_tokens=32",
            *tiny_roles,
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    line = json.loads(open(summary["metrics"]).read().splitlines()[0])
    for key in ("evolving/extractor_reward", "evolving/solver_reward", "train/entropy", "train/kl"):
        assert key in line, key
    assert line["train/entropy"] > 0.0  # computed because extractor samples carry the (negative) entropy term
    assert line["evolving/sources"] == 1.0
