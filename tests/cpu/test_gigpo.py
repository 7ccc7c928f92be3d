"""GiGPO's step groups and advantages on hand-built groups; BFCL's anchor-state keys."""

from __future__ import annotations

import math

import pytest

from evolvekit.attributing.gigpo import discounted_returns, gigpo_advantages, step_groups_summary


def test_discounted_returns_by_hand():
    assert discounted_returns([0.0, 0.0, 1.0], 0.5) == [0.25, 0.5, 1.0]
    assert discounted_returns([1.0, 0.0, 1.0], 1.0) == [2.0, 1.0, 1.0]


def test_gigpo_advantages_on_a_small_group_with_repeated_states():
    # three trajectories of one task; states: s0 (start), then a right (sR) or wrong (sW) first call.
    # τ0: s0 -> sR -> done, outcome 1;  τ1: s0 -> sW -> sW -> done, outcome 0;  τ2: s0 -> sR, outcome 0
    keys = [["s0", "sR"], ["s0", "sW", "sW"], ["s0", "sR"]]
    adv = gigpo_advantages([1.0, 0.0, 0.0], keys, gamma=0.5, omega=1.0, norm="std", eps=0.0)
    # episode: R = [1, 0, 0], mean 1/3, std (unbiased) = sqrt(1/3)
    sd = math.sqrt(1 / 3)
    a_e = [(1 - 1 / 3) / sd, (0 - 1 / 3) / sd, (0 - 1 / 3) / sd]
    # returns (γ = 0.5): τ0 [0.5, 1], τ1 [0, 0, 0], τ2 [0, 0]
    # step group s0: G = [0.5, 0, 0] -> mean 1/6, std sqrt(1/12)
    g0 = [(0.5 - 1 / 6) / math.sqrt(1 / 12), (0 - 1 / 6) / math.sqrt(1 / 12), (0 - 1 / 6) / math.sqrt(1 / 12)]
    # step group sR: G = [1 (τ0 t1), 0 (τ2 t1)] -> mean 0.5, std sqrt(0.5); sW: G = [0, 0] -> no spread -> 0
    gR = [(1 - 0.5) / math.sqrt(0.5), (0 - 0.5) / math.sqrt(0.5)]
    expected = [[a_e[0] + g0[0], a_e[0] + gR[0]], [a_e[1] + g0[1], a_e[1], a_e[1]], [a_e[2] + g0[2], a_e[2] + gR[1]]]
    for got, want in zip(adv, expected):
        assert got == pytest.approx(want, abs=1e-9)
    assert step_groups_summary(keys) == {"gigpo/step_groups": 3.0, "gigpo/grouped_steps": 7.0}
    # ω = 0 is plain GRPO's episode advantage on every step
    assert gigpo_advantages([1.0, 0.0, 0.0], keys, omega=0.0, eps=0.0)[0] == pytest.approx([a_e[0]] * 2)
    # mean normalisation; steps without a state key form no group
    m = gigpo_advantages([1.0, 0.0], [["a", None], ["a", None]], gamma=1.0, norm="mean")
    assert m == [[0.5 + 0.5, 0.5], [-0.5 - 0.5, -0.5]]


def test_bfcl_state_key_tracks_the_backend_state():
    from evolvekit.env.base import Action
    from evolvekit.env.bfcl import data
    from evolvekit.env.bfcl.env import BfclEnv
    from evolvekit.types import ToolCall

    task = next(t for t in data.load_tasks("multi_turn_base") if "GorillaFileSystem" in t.metadata["involved_classes"])
    a, b = BfclEnv(), BfclEnv()
    a.reset(task)
    b.reset(task)
    assert a.state_key() == b.state_key()  # same state in two episodes: same key
    start = a.state_key()
    a.step(Action(tool_calls=[ToolCall(name="ls", arguments={})]))  # reads only
    assert a.state_key() == start
    a.step(Action(tool_calls=[ToolCall(name="mkdir", arguments={"dir_name": "new_dir"})]))
    assert a.state_key() != start
    b.step(Action(tool_calls=[ToolCall(name="mkdir", arguments={"dir_name": "new_dir"})]))
    assert a.state_key() == b.state_key()


@pytest.mark.slow
def test_a_run_with_gigpo_credit_records_anchor_states_and_groups_steps(tmp_path, tiny_sets):
    """attributing.source: gigpo on the arith family with a tiny model: no attributor is built, every step carries
    its anchor state, and each task's first steps (all from the start state) form a step group."""
    from evolvekit.config import load_config
    from evolvekit.llm.tiny import make_tiny_model
    from evolvekit.orchestrator.build import build_loop
    from evolvekit.orchestrator.run_dir import open_run

    tiny = make_tiny_model(tmp_path / "tiny")
    cfg = load_config(
        None,
        [
            f"run.out_dir={tmp_path}",
            "env.family=arith",
            *tiny_sets,  # every helper role tiny too (issue 97)
            f"models.policy.model={tiny}",
            "models.policy.max_new_tokens=12",
            "rollout.max_steps=2",
            "rollout.group_size=3",
            "train.iterations=1",
            "train.tasks_per_iteration=2",
            "train.eval_before=false",
            "train.eval_after=false",
            "train.autocast=off",
            "attributing.enabled=true",
            "attributing.source=gigpo",
        ],
    )
    cfg, run_dir, store = open_run(cfg, None)
    loop = build_loop(cfg, run_dir, store, show_progress=False)
    assert loop.stages.samples.attributor is None
    loop.run()
    metrics = store.metrics()[0]
    assert metrics["gigpo/step_groups"] >= 2 and metrics["gigpo/grouped_steps"] >= 6
    trajs = store.trajectories(0, "train")
    assert all(s.state_key for t in trajs for s in t.steps)
    store.close()


def test_anchor_states_repeat_on_a_stateless_backend_only_where_the_observations_do():
    """On BFCL's MathAPI the backend state never changes, so the backend key alone made every turn one step group.
    The anchor adds the episode's observations (agent/rollout.py anchor_key, verl-agent's observation anchor): all
    rollouts share the start state; after a call, two rollouts share a state only if they saw the same result."""
    from evolvekit.agent.rollout import anchor_key
    from evolvekit.env.base import Action
    from evolvekit.env.bfcl.env import BfclEnv
    from evolvekit.env.bfcl.families import get_family
    from evolvekit.types import Step, ToolCall

    task = get_family("arith").tasks("train", 1)[0]
    anchors = []
    for a in (3, 3, 5):  # two rollouts call add(3, 4), one add(5, 4)
        env = BfclEnv()
        env.reset(task)
        start = anchor_key(env.state_key(), [])
        res = env.step(Action(tool_calls=[ToolCall(name="add", arguments={"a": a, "b": 4})]))
        step = Step(index=0, action_text="", tool_calls=[], observation=res.observation)
        backend_after = env.state_key()
        anchors.append((start, backend_after, anchor_key(backend_after, [step])))
        env.close()
    (s1, b1, k1), (s2, b2, k2), (s3, b3, k3) = anchors
    assert s1 == s2 == s3  # the start state is shared
    assert b1 == b3 and s1 != k1  # the backend alone cannot tell the two results apart; the anchor can
    assert k1 == k2 and k1 != k3


def test_step_rewards_the_outcome_on_the_last_step_and_lone_states_by_hand():
    """Issue 53 (the gigpo look after its timeouts were run again): the environment's step rewards enter the
    returns, the outcome is added to the last step's reward, and a state visited once has A^S = 0."""
    # T1 keys [s, u, v], rewards [0, 0.5, 0.25], outcome 1: r = [0, 0.5, 1.25]; gamma 0.5: G = [0.5625, 1.125, 1.25]
    # T2 keys [s, w], rewards [0.5, 0], outcome 0: r = [0.5, 0]; G = [0.5, 0]
    # mean norm: episode [+0.5, -0.5]; step group s {0.5625, 0.5} -> [+0.03125, -0.03125]; u, v, w alone -> 0
    adv = gigpo_advantages(
        [1.0, 0.0], [["s", "u", "v"], ["s", "w"]], [[0.0, 0.5, 0.25], [0.5, 0.0]], gamma=0.5, omega=1.0, norm="mean"
    )
    assert adv == [pytest.approx([0.53125, 0.5, 0.5]), pytest.approx([-0.53125, -0.5])]


def test_defaults_are_verl_agents_and_degenerate_std_is_passed_on():
    """γ 0.95, ω 1, std norm and ε 1e-6 when not given (the estimator passes γ, ω and the norm only)."""
    # std norm, every state alone: the episode advantage only, (1 - 0.5) / (sqrt(0.5) + 1e-6)
    alone = gigpo_advantages([1.0, 0.0], [["a"], ["b"]])
    a_e = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert alone == [[pytest.approx(a_e, rel=1e-9)], [pytest.approx(-a_e, rel=1e-9)]]
    # mean norm, shared first state: G = [0.95, 1] and [0, 0]; s -> [+0.475, -0.475]
    shared = gigpo_advantages([1.0, 0.0], [["s", "x"], ["s", "y"]], norm="mean")
    assert shared == [pytest.approx([0.975, 0.5]), pytest.approx([-0.975, -0.5])]
    # a spread below degenerate_std carries no signal: zeros, not a standardised ±0.71
    assert gigpo_advantages([1.0, 1.2], [["a"], ["b"]], degenerate_std=0.5) == [[0.0], [0.0]]


def test_an_unknown_norm_is_refused():
    with pytest.raises(ValueError, match="GiGPO's norm must be 'std' or 'mean', not 'median'"):
        gigpo_advantages([1.0, 0.0], [["a"], ["b"]], norm="median")  # type: ignore[arg-type]
