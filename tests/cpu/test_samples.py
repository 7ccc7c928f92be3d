"""train/samples.py against hand-built trajectories (issue 53: its mutation look): the snapshot merge, experience
stripping (§4.3) with the behaviour sequence Eq. 17 needs, plain GRPO's advantages (Eq. 16), the sample limits and
the context-management decisions (§6.2.1). Token ids are small integers, so every expected sequence is written out.
"""

from __future__ import annotations

import math

import pytest

from evolvekit.agent.context import MergedSequence
from evolvekit.train.samples import (
    SampleStats,
    build_samples,
    decision_samples,
    experience_mask,
    grpo_step_advantages,
    merge_trajectory,
    strip_spans,
    trajectory_reward,
)
from evolvekit.types import ContextDecision, SpanKind, Step, TokenSpan, Trajectory, TrajectoryFlags

EXP = SpanKind.EXPERIENCE


def _step(i, prompt, completion, logprobs=None, spans=()):
    return Step(
        index=i,
        action_text=f"a{i}",
        prompt_token_ids=list(prompt),
        completion_token_ids=list(completion),
        completion_logprobs=list(logprobs)
        if logprobs is not None
        else [-0.1 * (k + 1) for k in range(len(completion))],
        spans=list(spans),
    )


def _two_step(guided: bool = False, **kw) -> Trajectory:
    """Step 0 reads [1, 2, (9, 9 = experience), 3] and writes [10, 11]; step 1 extends that prompt by [4] and
    writes [12]: one merged sequence."""
    spans = [TokenSpan(start=2, end=4, kind=EXP)] if guided else []
    p0 = [1, 2, 9, 9, 3] if guided else [1, 2, 3]
    steps = [
        _step(0, p0, [10, 11], [-0.5, -0.25], spans),
        _step(1, [*p0, 10, 11, 4], [12], [-0.125], spans),
    ]
    return Trajectory(task_id="t", group_id="g", steps=steps, flags=TrajectoryFlags(experience_guided=guided), **kw)


def test_merge_rebuilds_one_sequence_with_masks_logprobs_and_step_spans():
    (seq,) = merge_trajectory(_two_step())
    assert seq.token_ids == [1, 2, 3, 10, 11, 4, 12]
    assert seq.loss_mask == [0, 0, 0, 1, 1, 0, 1]
    assert seq.logprobs == [0.0, 0.0, 0.0, -0.5, -0.25, 0.0, -0.125]
    assert seq.step_spans == {0: (3, 5), 1: (6, 7)}


def test_merge_skips_steps_without_completion_and_splits_where_the_prompt_is_no_extension():
    steps = [
        _step(0, [1, 2], [10]),
        _step(1, [1, 2, 10, 3], []),  # nothing generated (a failed call): not recorded
        _step(2, [7, 8], [11]),  # the context was rewritten: a new sequence
    ]
    seqs = merge_trajectory(Trajectory(task_id="t", steps=steps))
    assert [s.token_ids for s in seqs] == [[1, 2, 10], [7, 8, 11]]
    assert [s.step_spans for s in seqs] == [{0: (2, 3)}, {2: (2, 3)}]


def test_strip_removes_experience_tokens_and_shifts_every_span():
    (seq,) = merge_trajectory(_two_step(guided=True))
    assert seq.token_ids == [1, 2, 9, 9, 3, 10, 11, 4, 12]
    assert [(s.start, s.end, s.kind) for s in seq.spans if s.kind == EXP] == [(2, 4, EXP)]  # once, not per step
    assert experience_mask(seq) == [0, 0, 1, 1, 0, 0, 0, 0, 0]
    out = strip_spans(seq)
    assert out.token_ids == [1, 2, 3, 10, 11, 4, 12]
    assert out.loss_mask == [0, 0, 0, 1, 1, 0, 1]
    assert out.logprobs == [0.0, 0.0, 0.0, -0.5, -0.25, 0.0, -0.125]
    assert out.step_spans == {0: (3, 5), 1: (6, 7)}
    assert out.unstripped_ids == seq.token_ids and out.kept_positions == [0, 1, 4, 5, 6, 7, 8]
    assert not [s for s in out.spans if s.kind == EXP]
    assert [(s.start, s.end, s.kind) for s in out.spans] == [
        (0, 3, SpanKind.PROMPT),  # the first prompt [0, 5), less the experience's two tokens
        (3, 5, SpanKind.POLICY),
        (5, 6, SpanKind.PROMPT),
        (6, 7, SpanKind.POLICY),
    ]
    assert experience_mask(out) == [0] * 7


def test_strip_drops_spans_left_empty_and_keeps_other_kinds_on_request():
    seq = MergedSequence(
        token_ids=[1, 2, 3, 4],
        loss_mask=[0, 0, 1, 1],
        logprobs=[0.0, 0.0, -1.0, -2.0],
        step_spans={0: (2, 4)},
        spans=[
            TokenSpan(start=0, end=2, kind=SpanKind.PROMPT),
            TokenSpan(start=1, end=2, kind=EXP),
            TokenSpan(start=2, end=4, kind=SpanKind.POLICY),
        ],
    )
    out = strip_spans(seq)
    assert out.token_ids == [1, 3, 4] and out.step_spans == {0: (1, 3)}
    assert [(s.start, s.end, s.kind) for s in out.spans] == [(0, 1, SpanKind.PROMPT), (1, 3, SpanKind.POLICY)]
    only_prompt = MergedSequence(token_ids=[5, 6], loss_mask=[0, 1], logprobs=[0.0, -1.0], step_spans={0: (1, 2)})
    only_prompt.spans = [TokenSpan(start=0, end=1, kind=EXP)]
    gone = strip_spans(only_prompt)
    assert gone.spans == [] and gone.token_ids == [6] and gone.step_spans == {0: (0, 1)}
    assert strip_spans(seq, frozenset({SpanKind.POLICY})).token_ids == [1, 2]  # another kind, by request
    untouched = strip_spans(seq, frozenset())
    assert untouched is seq and untouched.unstripped_ids is None  # nothing to drop: the sequence itself


def test_grpo_step_advantages_are_eq16_per_group_on_every_step():
    def traj(reward, group, n=2):
        return Trajectory(
            task_id="t", group_id=group, outcome_reward=reward, steps=[_step(i, [1], [2]) for i in range(n)]
        )

    group = [traj(1.0, "g"), traj(0.0, "g"), traj(0.0, "g"), traj(0.5, "h"), traj(0.5, "h")]
    adv = grpo_step_advantages(group)
    std = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)  # unbiased
    assert adv[0] == {0: pytest.approx((2 / 3) / (std + 1e-6)), 1: pytest.approx((2 / 3) / (std + 1e-6))}
    assert adv[1][0] == pytest.approx((-1 / 3) / (std + 1e-6)) and adv[1].keys() == {0, 1}
    assert adv[3] == {0: 0.0, 1: 0.0} and adv[4] == {0: 0.0, 1: 0.0}  # a degenerate group: no signal
    loose = grpo_step_advantages(group, eps_norm=1.0)
    assert loose[0][0] == pytest.approx((2 / 3) / (std + 1.0))
    custom = grpo_step_advantages(group[:2], reward_fn=lambda t: -trajectory_reward(t))
    assert custom[0][0] < 0 < custom[1][0]
    lone = [traj(1.0, None), traj(0.0, None)]  # no group id: each trajectory is its own group
    assert grpo_step_advantages(lone) == [{0: 0.0, 1: 0.0}, {0: 0.0, 1: 0.0}]
    assert trajectory_reward(Trajectory(task_id="t")) == 0.0 and trajectory_reward(traj(0.25, "g")) == 0.25


def test_build_samples_broadcasts_step_advantages_and_carries_the_behaviour_sequence():
    traj = _two_step(guided=True)
    samples, stats = build_samples([traj], [{0: 0.5, 1: -2.0}])
    (s,) = samples
    assert s.token_ids == [1, 2, 3, 10, 11, 4, 12] and s.loss_mask == [0, 0, 0, 1, 1, 0, 1]
    assert s.token_advantages == [0.0, 0.0, 0.0, 0.5, 0.5, 0.0, -2.0]
    assert s.experience_mask == [0] * 7 and s.experience_guided
    assert (s.trajectory_id, s.group_id) == (traj.trajectory_id, "g")
    assert s.behaviour_token_ids == [1, 2, 9, 9, 3, 10, 11, 4, 12]  # Eq. 17: π_old(τ | q, exp)
    assert s.behaviour_positions == [0, 1, 4, 5, 6, 7, 8]
    assert s.rollout_logprobs == [0.0, 0.0, 0.0, -0.5, -0.25, 0.0, -0.125]
    assert (stats.trajectories, stats.samples, stats.skipped_failed, stats.skipped_too_long) == (1, 1, 0, 0)

    (raw,), _ = build_samples([traj], [{0: 0.5, 1: -2.0}], strip_experience=False)
    assert raw.token_ids == [1, 2, 9, 9, 3, 10, 11, 4, 12] and raw.experience_mask == [0, 0, 1, 1, 0, 0, 0, 0, 0]
    assert raw.token_advantages == [0.0] * 5 + [0.5, 0.5, 0.0, -2.0]
    assert raw.behaviour_token_ids is None and raw.behaviour_positions is None and raw.rollout_logprobs is None

    (plain,), _ = build_samples([_two_step()], [{0: 1.0}])  # nothing stripped: no behaviour sequence either
    assert plain.behaviour_token_ids is None and plain.token_advantages == [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert not plain.experience_guided and plain.group_id == "g"
    (own,), _ = build_samples([Trajectory(task_id="t", steps=_two_step().steps)], [{0: 1.0}])
    assert own.group_id == own.trajectory_id  # no group: its own


def test_build_samples_skips_failed_and_too_long_and_scales_advantages():
    ok = _two_step()
    failed = _two_step().model_copy(update={"flags": TrajectoryFlags(failed=True)})
    samples, stats = build_samples([failed, ok], [{0: 1.0, 1: 1.0}, {0: 1.0, 1: 1.0}], max_tokens=7)
    assert len(samples) == 1 and samples[0].trajectory_id == ok.trajectory_id
    assert (stats.trajectories, stats.skipped_failed, stats.skipped_too_long, stats.samples) == (2, 1, 0, 1)
    samples, stats = build_samples([ok], [{0: 1.0, 1: 1.0}], max_tokens=6)  # 7 tokens: over
    assert samples == [] and stats.skipped_too_long == 1 and stats.samples == 0
    guided = _two_step(guided=True)  # 9 tokens generated, 7 after stripping: the limit reads the trained sequence
    assert len(build_samples([guided], [{0: 1.0}], max_tokens=7)[0]) == 1
    assert build_samples([guided], [{0: 1.0}], max_tokens=8, strip_experience=False)[0] == []
    (scaled,), _ = build_samples([ok], [{0: 0.5, 1: -1.0}], advantage_scale=lambda t: 0.5)
    assert scaled.token_advantages == [0.0, 0.0, 0.0, 0.25, 0.25, 0.0, -0.5]


def test_decisions_are_samples_with_the_advantage_of_the_step_they_preceded():
    decisions = [
        ContextDecision(before_step=1, prompt_token_ids=[1, 2], completion_token_ids=[30, 31]),
        ContextDecision(before_step=5, prompt_token_ids=[1], completion_token_ids=[32]),  # after every step
        ContextDecision(before_step=0, prompt_token_ids=[1, 2, 3], completion_token_ids=[]),  # nothing generated
        ContextDecision(before_step=0, prompt_token_ids=[1, 2, 3, 4, 5], completion_token_ids=[33, 34, 35]),
    ]
    traj = _two_step().model_copy(update={"context_decisions": decisions})
    stats = SampleStats()
    out = decision_samples(traj, {0: 0.75, 1: -0.5}, max_tokens=7, stats=stats)
    assert [s.token_ids for s in out] == [[1, 2, 30, 31], [1, 32]]
    assert out[0].loss_mask == [0, 0, 1, 1] and out[0].token_advantages == [0.0, 0.0, -0.5, -0.5]
    assert out[1].loss_mask == [0, 1] and out[1].token_advantages == [0.0, -0.5]  # the last step's advantage
    assert out[0].experience_mask == [0, 0, 0, 0] and out[0].group_id == "g"
    assert stats.skipped_too_long == 1  # the 8-token one; the empty one is not counted as too long
    assert len(decision_samples(traj, {0: 0.75, 1: -0.5}, max_tokens=8, stats=SampleStats())) == 3
    assert decision_samples(traj, {}, None, SampleStats())[1].token_advantages == [0.0, 0.0]  # no step: 0
    samples, stats = build_samples([traj], [{0: 0.75, 1: -0.5}], advantage_scale=lambda t: 2.0)
    assert len(samples) == 1 + 3 and stats.samples == 4
    assert samples[1].token_advantages == [0.0, 0.0, -1.0, -1.0]  # scaled like the steps


def test_a_span_left_empty_by_stripping_is_dropped_whatever_its_kind():
    """A prompt span that lay wholly inside the experience has no tokens left: it is dropped, not kept empty."""
    seq = MergedSequence(
        token_ids=[1, 2, 3, 4],
        loss_mask=[0, 0, 0, 1],
        logprobs=[0.0, 0.0, 0.0, -1.0],
        step_spans={0: (3, 4)},
        spans=[
            TokenSpan(start=0, end=3, kind=EXP),
            TokenSpan(start=1, end=2, kind=SpanKind.PROMPT),  # inside the experience
            TokenSpan(start=3, end=4, kind=SpanKind.POLICY),
        ],
    )
    out = strip_spans(seq)
    assert out.token_ids == [4] and [(s.start, s.end, s.kind) for s in out.spans] == [(0, 1, SpanKind.POLICY)]


def test_build_samples_counts_every_skip_and_goes_on_after_a_long_sequence():
    failed = [_two_step().model_copy(update={"flags": TrajectoryFlags(failed=True)}) for _ in range(2)]
    _, stats = build_samples(failed, [{0: 1.0}, {0: 1.0}])
    assert stats.skipped_failed == 2
    _, stats = build_samples([_two_step(), _two_step()], [{0: 1.0}, {0: 1.0}], max_tokens=6)
    assert stats.skipped_too_long == 2
    # two sequences (step 1's prompt does not extend step 0's): the first is over the limit, the second is not
    split = Trajectory(task_id="t", group_id="g", steps=[_step(0, [1, 2, 3, 4, 5], [10, 11]), _step(1, [7], [12])])
    samples, stats = build_samples([split], [{0: 1.0, 1: -1.0}], max_tokens=5)
    assert [s.token_ids for s in samples] == [[7, 12]] and stats.skipped_too_long == 1
    # the scale is asked of each trajectory
    guided, plain = _two_step(guided=True), _two_step()
    out, _ = build_samples(
        [guided, plain], [{0: 1.0, 1: 1.0}] * 2, advantage_scale=lambda t: 0.5 if t.flags.experience_guided else 2.0
    )
    assert max(out[0].token_advantages) == 0.5 and max(out[1].token_advantages) == 2.0


def test_decisions_through_build_samples_keep_its_limit_and_the_last_steps_advantage():
    decisions = [
        ContextDecision(before_step=9, prompt_token_ids=[1], completion_token_ids=[32]),  # after every step
        ContextDecision(before_step=0, prompt_token_ids=[1, 2, 3, 4, 5], completion_token_ids=[33, 34, 35]),
        ContextDecision(before_step=0, prompt_token_ids=[1, 2, 3, 4, 5, 6], completion_token_ids=[36, 37]),
    ]
    traj = _two_step().model_copy(update={"context_decisions": decisions})
    stats = SampleStats()
    out = decision_samples(traj, {0: 0.75, 1: -0.5, 2: 0.25}, max_tokens=7, stats=stats)
    assert [s.token_advantages for s in out] == [[0.0, 0.25]]  # the last of three steps, not the second
    assert stats.skipped_too_long == 2
    samples, stats = build_samples([traj], [{0: 0.75, 1: -0.5}], max_tokens=7)
    assert [s.token_ids for s in samples] == [[1, 2, 3, 10, 11, 4, 12], [1, 32]] and stats.skipped_too_long == 2
