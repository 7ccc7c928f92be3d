"""EvolveR's format reward: execution-checked partial credit, mixed with the outcome by w_o / w_f."""

import pytest

from evolvekit.train.rewards import format_reward, shape_rewards
from evolvekit.types import Step, ToolCall, Trajectory


def _step(i, calls=None, parse_error=None, text="x"):
    tc = [ToolCall(name=c["name"]) for c in (calls or [])]
    return Step(index=i, action_text=text, tool_calls=tc, parse_error=parse_error, calls=calls or [])


def test_format_reward_partial_credit():
    t = Trajectory(
        task_id="t",
        steps=[
            _step(0, [{"name": "add", "ok": True, "unknown_tool": False}]),  # 1
            _step(
                1,
                [
                    {"name": "add", "ok": False, "unknown_tool": False},  # bad args 0.5
                    {"name": "plus", "ok": False, "unknown_tool": True},
                ],
            ),  # unknown 0 -> 0.25
            _step(2, parse_error="bad json"),  # 0
            _step(3, text="The answer is 7."),
        ],
    )  # not scored
    assert format_reward(t) == pytest.approx((1.0 + 0.25 + 0.0) / 3)
    assert format_reward(Trajectory(task_id="t", steps=[_step(0, text="hi")])) == 0.0


def test_shape_rewards_mixes_and_keeps_parts():
    a = Trajectory(
        task_id="t", outcome_reward=1.0, steps=[_step(0, [{"name": "add", "ok": True, "unknown_tool": False}])]
    )
    b = Trajectory(task_id="t", outcome_reward=0.0, steps=[_step(0, parse_error="x")])
    assert shape_rewards([a, b], 1.0, 0.0) == {}  # paper-faithful default: untouched
    assert a.outcome_reward == 1.0
    m = shape_rewards([a, b], 1.0, 0.1)
    assert a.outcome_reward == pytest.approx(1.1) and b.outcome_reward == pytest.approx(0.0)
    assert (a.rewards.outcome, a.rewards.format) == (1.0, 1.0)
    assert m == {"reward/format": 0.5, "reward/outcome": 0.5}


def test_evolver_format_reward_eq4_by_hand():
    from evolvekit.train.rewards import evolver_format_reward, search_score
    from evolvekit.types import Step, ToolCall, Trajectory, TrajectoryFlags

    def step(i, names, ok=True):
        return Step(
            index=i,
            action_text="x",
            tool_calls=[ToolCall(name=n) for n in names],
            calls=[{"name": n, "ok": ok, "unknown_tool": False} for n in names],
        )

    assert search_score(0, True) == 0.0 and search_score(1, False) == 0.2 and search_score(1, True) == 0.5
    assert abs(search_score(3, True) - 0.7) < 1e-9 and abs(search_score(9, True) - 1.0) < 1e-9  # bonus capped at 0.5
    searched = Trajectory(task_id="t", steps=[step(0, ["search_experience"]), step(1, ["add"]), step(2, [])])
    assert abs(evolver_format_reward(searched) - (1.0 + 0.5) / 2) < 1e-9  # all calls ran; both kinds of search
    plain = Trajectory(task_id="t", steps=[step(0, ["add"]), step(1, [])])
    assert evolver_format_reward(plain) == 0.5  # never searched: at most half
    cut = searched.model_copy(update={"flags": TrajectoryFlags(truncated=True)})
    assert evolver_format_reward(cut) == 0.0  # 𝟙(τ complete)


def test_partial_credit_by_hand_and_only_from_references_the_boundary_opens():
    from evolvekit.boundary import InformationBoundary
    from evolvekit.train.rewards import partial_credit, shape_rewards
    from evolvekit.types import CallOutcome, Step, Task, TaskSource, ToolCall, Trajectory

    add, mul = ToolCall(name="add", arguments={"a": 2, "b": 3}), ToolCall(name="multiply", arguments={"a": 5, "b": 4})
    ref = [[add, mul]]

    def traj(task_id: str, calls: list[tuple[ToolCall, bool]]) -> Trajectory:
        steps = [
            Step(index=i, action_text="", tool_calls=[c], observation="", calls=[CallOutcome(name=c.name, ok=ok)])
            for i, (c, ok) in enumerate(calls)
        ]
        return Trajectory(task_id=task_id, group_id="g", steps=steps, outcome_reward=0.0)

    same_add = ToolCall(name="add", arguments={"a": 2.0, "b": 3})  # 2.0 = 2 after normalising
    assert partial_credit(traj("t", [(same_add, True)]), ref) == 0.5
    assert partial_credit(traj("t", [(add, True), (add, True), (mul, False)]), ref) == 0.5  # once each; errors miss
    assert partial_credit(traj("t", [(add, True), (mul, True)]), ref) == 1.0
    assert partial_credit(traj("t", []), []) == 0.0
    person = Task(task_id="p", env_name="x", query="q", reference_solution=ref)
    made = Task(task_id="s", env_name="x", query="q", reference_solution=ref, source=TaskSource.SYNTHETIC)
    closed = InformationBoundary().references([person, made])
    assert closed == {"p": None, "s": ref}
    trajs = [traj("p", [(add, True)]), traj("s", [(add, True)])]
    shape_rewards(trajs, 1.0, 0.0, w_partial=0.2, references=closed)
    assert [t.outcome_reward for t in trajs] == [0.0, 0.1]  # the person-written task's gold stays closed
    opened = [traj("p", [(add, True)])]
    shape_rewards(opened, 1.0, 0.0, w_partial=0.2, references=InformationBoundary(oracle=True).references([person]))
    assert opened[0].outcome_reward == 0.1 and opened[0].metadata["partial_credit"] == 0.5


def test_the_reward_is_computed_once_from_an_immutable_record():
    """Issue 55 (5): outcome_reward was rewritten in four places (rollout, judge mix, shaping, Evolving-RL). Now the
    rollout records the environment's check, the judge stage and Evolving-RL record their parts, and shape_rewards
    alone computes the reward from the record; the record cannot be changed in place."""
    import re
    from pathlib import Path

    import pydantic

    from evolvekit.train.rewards import outcome_part
    from evolvekit.types import RewardParts

    src = Path(__file__).resolve().parents[2] / "src" / "evolvekit"
    writers = sorted(
        str(p.relative_to(src))
        for p in src.rglob("*.py")
        if re.search(r"\.outcome_reward\s*(\+|-)?=[^=]", p.read_text())
    )
    assert writers == ["agent/rollout.py", "train/rewards.py"], writers
    parts = RewardParts(env=1.0)
    with pytest.raises(pydantic.ValidationError):
        parts.env = 0.0  # type: ignore[misc]
    # R_out from the parts: an extractor's utility, a synthesized task's judge mix, else the environment's check
    assert outcome_part(RewardParts(env=1.0, skill_utility=0.25), 0.0) == 0.25
    assert outcome_part(RewardParts(env=1.0, state_score=1.0, judge_score=0.2), 0.0, "mix", 0.5) == pytest.approx(0.6)
    assert outcome_part(RewardParts(env=1.0, state_score=1.0, judge_score=0.2), 0.0, "state", 0.5) == 1.0
    assert outcome_part(RewardParts(env=0.0), 1.0) == 0.0 and outcome_part(RewardParts(), 0.7) == 0.7
    t = Trajectory(task_id="t", outcome_reward=1.0, rewards=RewardParts(env=1.0, state_score=1.0, judge_score=0.2))
    assert shape_rewards([t], 1.0, 0.0, synthetic_mode="judge") == {} and t.outcome_reward == 0.2


# --- issue 53: tests from the survivors of mutation testing train/rewards.py (203 of 229 killed at first) ---


def _ok(name):
    return {"name": name, "ok": True, "unknown_tool": False}


def test_format_rewards_score_every_step_after_an_unscored_one():
    from evolvekit.train.rewards import evolver_format_reward, search_score
    from evolvekit.types import TrajectoryFlags

    # a parse error (0), then a step with a good call (1): the mean over both, not a stop at the first
    t = Trajectory(task_id="t", steps=[_step(0, parse_error="x"), _step(1, [_ok("add")])])
    assert format_reward(t) == 0.5
    # a step without calls is not scored, and scoring goes on after it
    t2 = Trajectory(task_id="t", steps=[_step(0), _step(1, [_ok("add")])])
    assert format_reward(t2) == 1.0
    # a truncated episode with steps is not complete: 0
    trunc = Trajectory(task_id="t", steps=[_step(0, [_ok("add")])], flags=TrajectoryFlags(truncated=True))
    assert evolver_format_reward(trunc) == 0.0
    # experience search alone (0.2) against search and an environment tool (0.5)
    only = Trajectory(task_id="t", steps=[_step(0, [_ok("search_experience")])])
    both = Trajectory(task_id="t", steps=[_step(0, [_ok("search_experience")]), _step(1, [_ok("add")])])
    assert evolver_format_reward(only) == pytest.approx((1.0 + search_score(1, False)) / 2) == pytest.approx(0.6)
    assert evolver_format_reward(both) == pytest.approx((1.0 + search_score(1, True)) / 2) == pytest.approx(0.75)


def test_reasoning_reward_bounds_and_unscored_steps():
    from evolvekit.train.rewards import THINK_WORDS, reasoning_reward

    def step(i, ok, words):
        return Step(index=i, action_text="x", format_ok=ok, think_words=words)

    lo, hi = THINK_WORDS
    t = Trajectory(task_id="t", steps=[Step(index=0, action_text="x"), step(1, True, lo), step(2, True, hi)])
    assert reasoning_reward(t) == 1.0  # the unscored first step is skipped, not a stop; both bounds inclusive
    assert reasoning_reward(Trajectory(task_id="t", steps=[step(0, True, None)])) == 0.5  # no words: too short
    assert reasoning_reward(Trajectory(task_id="t", steps=[step(0, True, lo - 1)])) == 0.5
    assert reasoning_reward(Trajectory(task_id="t", steps=[Step(index=0, action_text="x")])) == 0.0  # nothing scored
    if lo > 1:  # one word is below the minimum
        assert reasoning_reward(Trajectory(task_id="t", steps=[step(0, True, 0)])) == 0.5


def test_partial_credit_counts_unrecorded_calls_as_run():
    from evolvekit.train.rewards import partial_credit

    ref = [[ToolCall(name="add", arguments={"a": 1})]]
    unrecorded = Trajectory(
        task_id="t", steps=[Step(index=0, action_text="x", tool_calls=[ToolCall(name="add", arguments={"a": 1})])]
    )
    assert partial_credit(unrecorded, ref) == 1.0


def test_mix_and_shaping_defaults_and_order():
    from evolvekit.train.rewards import mix_reward, outcome_part
    from evolvekit.types import RewardParts, TrajectoryFlags

    assert mix_reward("state", None, 0.3, 0.5) == 0.0  # no state check: 0, not 1
    assert mix_reward("mix", 0.5, 0.2, 0.5) == pytest.approx(0.35)  # w·judge + (1 − w)·state
    judged = RewardParts(state_score=1.0, judge_score=0.2)
    assert outcome_part(judged, 0.0) == 1.0  # the default mode is the state check
    assert outcome_part(judged, 0.0, "mix") == pytest.approx(0.6)  # the default judge weight is 0.5
    t = Trajectory(task_id="t", outcome_reward=1.0, rewards=judged)
    shape_rewards([t], 1.0, 0.0)
    assert t.outcome_reward == 1.0  # shape_rewards' default mode: the state check
    t = Trajectory(task_id="t", outcome_reward=1.0, rewards=judged)
    shape_rewards([t], 1.0, 0.0, synthetic_mode="mix")
    assert t.outcome_reward == pytest.approx(0.6)  # its default judge weight: 0.5
    t = Trajectory(task_id="t", outcome_reward=1.0, rewards=judged)
    shape_rewards([t], 1.0, 0.0, synthetic_mode="mix", judge_weight=0.25)
    assert t.outcome_reward == pytest.approx(0.8)
    # a failed trajectory is skipped, and the ones after it are still computed (shaping on and off)
    for w_format in (0.0, 0.1):
        failed = Trajectory(task_id="t", outcome_reward=0.0, flags=TrajectoryFlags(failed=True))
        after = Trajectory(task_id="t", outcome_reward=1.0, rewards=judged, steps=[_step(0, [_ok("add")])])
        shape_rewards([failed, after], 1.0, w_format, synthetic_mode="judge")
        assert after.outcome_reward == pytest.approx(0.2 + w_format * 1.0)
    # partial credit adds to the outcome, it does not replace it
    ref = {"t": [[ToolCall(name="add")]]}
    t = Trajectory(task_id="t", outcome_reward=1.0, steps=[_step(0, [_ok("add")])])
    shape_rewards([t], 1.0, 0.0, w_partial=0.2, references=ref)
    assert t.outcome_reward == pytest.approx(1.2)


def test_every_trajectory_gets_its_reward_and_a_failed_episode_no_format_reward():
    from evolvekit.train.rewards import evolver_format_reward
    from evolvekit.types import RewardParts, TrajectoryFlags

    judged = RewardParts(state_score=1.0, judge_score=0.2)
    trajs = [Trajectory(task_id="t", outcome_reward=1.0, rewards=judged) for _ in range(3)]
    shape_rewards(trajs, 1.0, 0.0, synthetic_mode="judge")  # no shaping weight: the reward is R_out, for all three
    assert [t.outcome_reward for t in trajs] == [0.2, 0.2, 0.2]
    failed = Trajectory(task_id="t", steps=[_step(0, [_ok("add")])], flags=TrajectoryFlags(failed=True))
    assert evolver_format_reward(failed) == 0.0
