"""Grounded step credit (attributing/grounded.py) on trajectories built by stepping the real BFCL backends."""

from __future__ import annotations

import pytest

from evolvekit.agent.calls import call_key, normalise
from evolvekit.attributing.credit import attribution_degenerate, attribution_rewards
from evolvekit.attributing.grounded import agreement, grounded_labels
from evolvekit.env.base import Action
from evolvekit.env.bfcl.env import BfclEnv
from evolvekit.types import Step, StepGrounding, StepLabel, Task, ToolCall

G, B, N = StepLabel.GOOD, StepLabel.BAD, StepLabel.NEUTRAL

FS = {
    "GorillaFileSystem": {
        "root": {
            "ws": {
                "type": "directory",
                "contents": {
                    "a.txt": {"type": "file", "content": "alpha"},
                    "b.txt": {"type": "file", "content": "beta"},
                },
            }
        }
    }
}


def _task(reference, query=("Make a folder 'out' and move a.txt into it.", "Now show b.txt.")) -> Task:
    return Task(
        task_id="fs-1",
        env_name="bfcl",
        query=list(query),
        initial_config=FS,
        reference_solution=reference,
        metadata={"involved_classes": ["GorillaFileSystem"], "category": "multi_turn_base"},
    )


def _math_task(task_id: str, query: str | tuple[str, ...], reference: list[list[ToolCall]]) -> Task:
    """A task on BFCL's stateless MathAPI backend."""
    return Task(
        task_id=task_id,
        env_name="bfcl",
        query=query if isinstance(query, str) else list(query),
        reference_solution=reference,
        metadata={"involved_classes": ["MathAPI"], "category": "multi_turn_base"},
    )


REFERENCE = [
    [
        ToolCall(name="mkdir", arguments={"dir_name": "out"}),
        ToolCall(name="mv", arguments={"source": "a.txt", "destination": "out"}),
    ],
    [ToolCall(name="cat", arguments={"file_name": "b.txt"})],
]


def _episode(task: Task, actions: list[Action]) -> tuple[list[Step], BfclEnv]:
    env = BfclEnv()
    env.reset(task)
    steps = []
    for i, action in enumerate(actions):
        res = env.step(action)
        steps.append(
            Step(
                index=i,
                action_text="",
                tool_calls=action.tool_calls,
                parse_error=action.parse_error,
                observation=res.observation,
                grounding=res.grounding,
                calls=[{"name": r.name, "ok": r.ok} for r in res.call_results],
            )
        )
    return steps, env


def call(name: str, **arguments) -> Action:
    return Action(tool_calls=[ToolCall(name=name, arguments=arguments)])


def test_bfcl_reports_state_distance_to_the_reference_end_state():
    steps, _ = _episode(_task(REFERENCE), [call("mkdir", dir_name="out"), call("ls"), Action(text="done")])
    # the reference's turn-0 end state differs from the start by the new folder and the moved file
    first = steps[0].grounding
    assert first.state_changed and first.distance_after < first.distance_before
    assert steps[1].grounding == StepGrounding(
        state_changed=False, distance_before=first.distance_after, distance_after=first.distance_after
    )


def test_grounded_rules_on_built_bfcl_trajectories():
    actions = [
        call("cat", file_name="nope.txt"),  # 0: refused by the backend ({"error": ...})      -> BAD
        call("mkdir", dir_name="out"),  # 1: a reference call                                 -> GOOD
        call("mkdir", dir_name="out"),  # 2: repeats step 1; refused too ("already exists")   -> BAD
        call("ls"),  # 3: no effect, not in the reference (state unchanged)                   -> BAD
        call("touch", file_name="c.txt"),  # 4: changes the state, away from the reference    -> BAD
        call("mv", source="a.txt", destination="out"),  # 5: reference call                   -> GOOD
        Action(text="Done."),  # 6: turn 0 ends with both reference calls executed           -> GOOD
        call("cat", file_name=" B.TXT "),  # 7: turn 1's reference call, other spelling -> refused -> BAD
        call("cat", file_name="b.txt"),  # 8: turn 1's reference call                         -> GOOD
        Action(text="beta"),
    ]  # 9: the last turn's answer follows the episode's check
    steps, env = _episode(_task(REFERENCE), actions)
    assert [s.calls[0].ok for s in steps[:1]] == [False]
    passed = env.evaluate().passed
    labels = grounded_labels(steps, REFERENCE, passed)
    assert labels[:9] == [B, G, B, B, B, G, G, B, G]
    assert labels[9] == (G if passed else B)
    assert grounded_labels(steps, REFERENCE, True)[9] == G and grounded_labels(steps, REFERENCE, False)[9] == B


def test_a_state_change_toward_the_reference_that_is_not_a_reference_call_is_good():
    # the reference makes 'out' then moves a.txt; an agent that copies a.txt into 'out' and removes the original
    # reaches the same leaves through other calls: each of those calls moves the state closer
    steps, _ = _episode(
        _task(REFERENCE),
        [
            call("mkdir", dir_name="out"),
            call("cp", source="a.txt", destination="out"),
            call("rm", file_name="a.txt"),
            Action(text="ok"),
        ],
    )
    g = [s.grounding for s in steps]
    assert g[1].distance_after < g[1].distance_before and g[2].distance_after < g[2].distance_before
    assert g[3].distance_before == 0  # the turn ends at the reference's end state
    assert grounded_labels(steps, REFERENCE, False)[:4] == [G, G, G, G]


def test_turn_ended_short_is_bad_and_parse_errors_are_bad():
    steps, _ = _episode(
        _task(REFERENCE),
        [Action(parse_error="no call", text="hmm"), call("mkdir", dir_name="out"), Action(text="done")],
    )
    assert grounded_labels(steps, REFERENCE, False) == [B, G, B]


def test_stateless_backend_non_reference_call_is_bad_and_numbers_normalise():
    ref = [[ToolCall(name="add", arguments={"a": 3, "b": 4})]]
    task = _math_task("m-1", "3 plus 4?", ref)
    steps, _ = _episode(
        task, [call("multiply", a=3, b=4), call("multiply", a=3, b=4), call("add", a=3.0, b=4.0), Action(text="7")]
    )
    assert steps[0].grounding == StepGrounding(state_changed=False)  # MathAPI has no state to approach
    assert grounded_labels(steps, ref, True) == [B, B, G, G]


def test_another_solution_the_check_accepted_is_good_only_when_the_episode_passed():
    """Rule 6: add(a=4, b=3) for the reference add(a=3, b=4) is what passed the check (stateless MathAPI)."""
    ref = [[ToolCall(name="add", arguments={"a": 3, "b": 4})], [ToolCall(name="multiply", arguments={"a": 7, "b": 2})]]
    task = _math_task("m-2", ("Add 3 and 4.", "Now multiply the result by 2."), ref)
    acts = [call("add", a=4, b=3), Action(text="7"), call("multiply", a=7, b=2), Action(text="14")]
    steps, _ = _episode(task, acts)
    # passed: the first turn's call and its answer (ended "short" of the literal reference) are GOOD
    assert grounded_labels(steps, ref, True) == [G, G, G, G]
    # failed: nothing says the other call was right, so rules 2 and 5 stand
    assert grounded_labels(steps, ref, False) == [B, B, G, B]
    # a wasted call stays BAD when the reference call was executed as well, errors and repeats stay BAD
    acts = [call("multiply", a=1, b=1), call("multiply", a=1, b=1), call("add", a=3, b=4), Action(text="7")]
    acts += [call("multiply", a=7, b=2), Action(text="14")]
    steps, _ = _episode(task, acts)
    assert grounded_labels(steps, ref, True) == [B, B, G, G, G, G]


def test_generic_fallback_without_a_reference_errors_bad_rest_neutral():
    steps = [
        Step(index=0, action_text="", tool_calls=[ToolCall(name="x")], calls=[{"ok": False}]),
        Step(index=1, action_text="", tool_calls=[ToolCall(name="y")], calls=[{"ok": True}]),
        Step(index=2, action_text="", parse_error="bad"),
        Step(index=3, action_text="bye"),
    ]
    # the final answer follows the environment's check; off, it is NEUTRAL (the rule before 2026-11-27)
    assert grounded_labels(steps, None, True) == [B, N, B, G]
    assert grounded_labels(steps, None, False) == [B, N, B, B]
    assert grounded_labels(steps, None, False, answer_from_check=False) == [B, N, B, N]
    assert grounded_labels(steps[:3], None, True) == [B, N, B]  # the last step is an unparseable action: rule 1
    assert grounded_labels(steps[:2], None, False) == [B, N]  # the last step makes a call: no answer to judge
    assert attribution_rewards([G, B, N]) == [1.0, -1.0, 0.0]
    # a reference but no state facts from the environment: non-reference calls carry no verdict
    ref = [[ToolCall(name="z")]]
    assert grounded_labels(steps[1:2], ref, True) == [N]


def test_normalisation_and_agreement():
    assert normalise(3) == normalise(3.0) and normalise(True) != normalise(1)
    assert normalise(" Out ") == normalise("out") and normalise([1, "A"]) == normalise((1.0, "a"))
    assert call_key(ToolCall(name="f", arguments={"x": 1, "y": [2]})) == call_key(
        ToolCall(name="f", arguments={"y": [2.0], "x": 1.0})
    )
    assert call_key(ToolCall(name="f", arguments={"x": 1})) != call_key(ToolCall(name="g", arguments={"x": 1}))
    assert agreement([G, G, B, G], [G, B, B, N]) == (2, 3)


def test_mixed_outcomes_give_a_non_degenerate_channel():
    # a success (reference call then answer) and a failure (wrong call then answer) of one task
    ref = [[ToolCall(name="add", arguments={"a": 3, "b": 4})]]
    task = _math_task("m-2", "3 plus 4?", ref)
    win, _ = _episode(task, [call("add", a=3, b=4), Action(text="7")])
    lose, _ = _episode(task, [call("add", a=3, b=5), Action(text="8")])
    labels = [grounded_labels(win, ref, True), grounded_labels(lose, ref, False)]
    assert labels == [[G, G], [B, B]]
    assert not attribution_degenerate([attribution_rewards(lab) for lab in labels])


def test_step_population_credits_an_all_failed_chain_group_that_eq_18_neutralises(tmp_path):
    """ORACLE (the task is person-written). The sparse chain (add, then multiply the sum, one request): every rollout
    makes the right add and then answers without the multiply. Grounded labels are GOOD, BAD in each; with Eq. 18's
    trajectory statistics the group's channel is constant and neutralised (no gradient at all: the outcomes are all 0
    too); with
    ``attributing.normalization=step`` the early answer gets a negative advantage and the add none."""
    from evolvekit.attributing.stage import AttributedSamples
    from evolvekit.config import load_config
    from evolvekit.orchestrator.stages import IterationContext
    from evolvekit.store.sqlite import RunStore
    from evolvekit.types import Trajectory

    ref = [[ToolCall(name="add", arguments={"a": 3, "b": 4}), ToolCall(name="multiply", arguments={"a": 7, "b": 2})]]
    task = _math_task("chain-1", "Add 3 and 4, then multiply the sum by 2.", ref)
    store = RunStore(tmp_path / "run.db")
    with store.transaction() as c:
        store.put_tasks(c, [task], -1)
    trajs = []
    for _ in range(3):
        steps, _ = _episode(task, [call("add", a=3, b=4), Action(text="7")])
        trajs.append(Trajectory(task_id=task.task_id, group_id="g", outcome_reward=0.0, steps=steps))
    assert grounded_labels(trajs[0].steps, ref, False) == [G, B]
    ctx = IterationContext(iteration=0, seed=0, run_dir=tmp_path, store=store)
    # the task is person-written: without the oracle switch its reference is closed and the all-failed group has no
    # success of its own to credit against, so no step gets a verdict and the channel is constant (no gold credit)
    closed = ["attributing.enabled=true", "attributing.source=grounded", "attributing.normalization=step"]
    old_rule = load_config(None, [*closed, "attributing.answer_from_check=false"])
    adv, mc = AttributedSamples.from_config(old_rule, None).step_advantages(ctx, trajs)
    assert mc["attribution/constant_channel_groups"] == 1 and mc["attribution/self_referenced"] == 0
    assert all(a == {0: 0.0, 1: 0.0} for a in adv)
    # by default the failed answers are BAD by the environment's check; the add still gets no verdict from the gold
    adv, mc = AttributedSamples.from_config(load_config(None, closed), None).step_advantages(ctx, trajs)
    assert all(t.step_attributions == [N, B] for t in trajs) and mc["attribution/constant_channel_groups"] == 0
    base = ["attributing.enabled=true", "attributing.source=grounded", "run.oracle=true"]
    eq18, m18 = AttributedSamples.from_config(load_config(None, base), None).step_advantages(ctx, trajs)
    assert all(a == {0: 0.0, 1: 0.0} for a in eq18) and m18["attribution/constant_channel_groups"] == 1
    cfg = load_config(None, [*base, "attributing.normalization=step"])
    step, m = AttributedSamples.from_config(cfg, None).step_advantages(ctx, trajs)
    assert m["attribution/constant_channel_groups"] == 0
    for a in step:
        assert a[0] == pytest.approx(0.0, abs=1e-9) and a[1] < -0.05  # the early answer is pushed down
    store.close()


def test_request_similarity_masks_numbers_and_keeps_operation_signs():
    from evolvekit.attributing.grounded import most_similar, request_similarity, request_words

    a, b = request_words("What is 3 plus 5?"), request_words("What is 12 plus 7.5?")
    c, d = request_words("What is 3 times 5?"), request_words("Compute 3 + 5.")
    assert request_similarity(a, b) == 1.0  # numbers differ only
    assert request_similarity(a, c) == pytest.approx(4 / 6)  # {what, is, #, ?} of {what, is, #, ?, plus, times}
    assert "+" in d and request_similarity(frozenset(), frozenset()) == 0.0
    assert most_similar(a, {"x": c, "y": b}, 0.8) == ("y", 1.0)
    assert most_similar(a, {"x": c}, 0.8) is None
    assert most_similar(a, {"q": c, "p": c}, 0.5) == ("p", pytest.approx(4 / 6))  # ties: the first id, sorted


def test_name_match_borrows_tool_names_not_arguments():
    steps, _ = _episode(_math_task("m-9", "10 plus 20?", [[ToolCall(name="add", arguments={"a": 10, "b": 20})]]),
                        [call("add", a=10, b=21), Action(text="31")])  # fmt: skip
    borrowed = [[ToolCall(name="add", arguments={"a": 3, "b": 4})]]  # another task's success
    assert grounded_labels(steps, borrowed, False, match="name") == [G, B]
    assert grounded_labels(steps, borrowed, False, match="call") == [B, B]  # whole calls: nothing matches


def test_earlier_successes_on_similar_tasks_credit_an_all_failed_person_task(tmp_path):
    """Issue 51 (2): step credit from earlier successes on similar tasks. Person-written task A was solved earlier
    (add, then the answer); every rollout of person-written task B ("What is 10 plus 20?", same wording) fails, some
    calling add with wrong numbers, some multiply. With attributing.similar_success_min the add steps are GOOD and
    the multiply steps BAD (the agent's own success on A, tool names only; never A's or B's reference: both are
    sentinels that no rollout ran); off, the closed all-failed group's calls get no verdict (its answers are BAD by
    the environment's check), so the add and the multiply are credited alike."""
    from evolvekit.attributing.stage import AttributedSamples
    from evolvekit.config import load_config
    from evolvekit.orchestrator.stages import IterationContext
    from evolvekit.store.sqlite import RunStore
    from evolvekit.types import Trajectory

    sentinel = [[ToolCall(name="subtract", arguments={"a": 987654, "b": 123})]]  # no rollout runs it
    a = _math_task("a", "What is 3 plus 4?", sentinel)
    b = _math_task("b", "What is 10 plus 20?", sentinel)
    far = _math_task("c", "Divide 9 by 3.", sentinel)
    store = RunStore(tmp_path / "run.db")
    with store.transaction() as c:
        store.put_tasks(c, [a, b, far], -1)
    ctx = IterationContext(iteration=0, seed=0, run_dir=tmp_path, store=store)

    def group(task, actions, reward):
        out = []
        for acts in actions:
            steps, _ = _episode(task, acts)
            out.append(Trajectory(task_id=task.task_id, group_id=task.task_id, outcome_reward=reward, steps=steps))
        return out

    solved = group(a, [[call("add", a=3, b=4), Action(text="7")]] * 2, 1.0)
    failed = group(b, [[call("add", a=10, b=21), Action(text="31")], [call("multiply", a=10, b=20), Action(text="200")]]
                   * 2, 0.0)  # fmt: skip
    on = ["attributing.enabled=true", "attributing.source=grounded", "attributing.normalization=step"]
    stage = AttributedSamples.from_config(load_config(None, [*on, "attributing.similar_success_min=0.8"]), None)
    stage.step_advantages(ctx, solved)  # the earlier success
    adv, m = stage.step_advantages(ctx, failed)
    assert m["attribution/similar_referenced"] == 1 and m["attribution/self_referenced"] == 0
    assert [t.step_attributions for t in failed] == [[G, B], [B, B]] * 2
    assert adv[0][0] > 0 > adv[1][0]  # the add is pushed up, the multiply down, in a group whose outcomes are all 0
    assert "987654" not in repr([t.model_dump() for t in failed])

    off = AttributedSamples.from_config(load_config(None, on), None)
    off.step_advantages(ctx, solved)
    adv_off, m_off = off.step_advantages(ctx, failed)
    assert m_off["attribution/similar_referenced"] == 0
    assert [t.step_attributions for t in failed] == [[N, B]] * 4  # only the check's verdict on the answers
    assert adv_off[0] == adv_off[1]  # the add and the multiply are not told apart

    dissimilar = AttributedSamples.from_config(load_config(None, [*on, "attributing.similar_success_min=0.8"]), None)
    dissimilar.step_advantages(ctx, group(far, [[call("divide", a=9, b=3), Action(text="3")]] * 2, 1.0))
    assert dissimilar.step_advantages(ctx, failed)[1]["attribution/similar_referenced"] == 0  # too different
    store.close()


def test_similar_success_min_needs_grounded_attribution():
    from evolvekit.config import load_config
    from evolvekit.errors import ConfigError

    with pytest.raises(ConfigError, match="similar_success_min"):
        load_config(None, ["attributing.similar_success_min=0.8"])  # attributing off
    with pytest.raises(ConfigError, match="similar_success_min"):
        load_config(
            None, ["attributing.enabled=true", "attributing.source=gigpo", "attributing.similar_success_min=0.8"]
        )


# --- issue 53: tests from the survivors of mutation testing attributing/grounded.py (146 of 174 killed at first) ---


def _s(i, calls=(), ok=None, parse_error=None, g=None, text=""):
    """A step: ``calls`` as (name, args) pairs; ``ok`` one flag per call (None: no per-call record)."""
    tc = [ToolCall(name=n, arguments=a) for n, a in calls]
    rec = [{"ok": o} for o in ok] if ok is not None else []
    return Step(index=i, action_text=text, tool_calls=tc, calls=rec, parse_error=parse_error, grounding=g)


def _g(changed, before, after):
    return StepGrounding(state_changed=changed, distance_before=before, distance_after=after)


def test_rule_6_revisits_only_steps_bad_for_not_matching_the_reference():
    """In a passed episode whose turn ended with a reference call unexecuted, rule 6 turns GOOD only the steps that
    were BAD for not matching (rule 2, stateless rule 5); errors (rule 1), repeats (rule 4) and a stateful step that
    moved away from the end state (rule 5) stay BAD."""
    ref = [[ToolCall(name="f", arguments={"x": 1})]]
    steps = [
        _s(0, [("g", {})], ok=[False]),  # rule 1: an errored call
        _s(1, parse_error="no JSON"),  # rule 1: nothing executable
        _s(2, [("h", {})], ok=[True], g=_g(True, 2, 3)),  # rule 5, stateful: farther from the end state
        _s(3, [("h", {})], ok=[True], g=_g(False, 3, 3)),  # rule 4: a repeat without effect
        _s(4, text="done"),  # the last turn's answer: GOOD, the episode passed
    ]
    assert grounded_labels(steps, ref, True) == [B, B, B, B, G]
    stateless = [_s(0, [("h", {})], ok=[True], g=_g(True, None, None)), _s(1, text="done")]
    assert grounded_labels(stateless, ref, False) == [B, B]
    assert grounded_labels(stateless, ref, True) == [G, G]  # rule 6: solved another way
    one_none = [_s(0, [("h", {})], ok=[True], g=_g(True, None, 2))]
    assert grounded_labels(one_none, ref, False) == [B]


def test_turns_advance_and_steps_past_the_last_turn_are_labelled():
    ref = [[ToolCall(name="a")], [ToolCall(name="b")], [ToolCall(name="c")]]
    none = _g(True, None, None)
    steps = [_s(0, [("a", {})], [True], g=none), _s(1, text="ok"), _s(2, [("b", {})], [True], g=none),
             _s(3, text="ok"), _s(4, [("c", {})], [True], g=none), _s(5, text="ok")]  # fmt: skip
    assert grounded_labels(steps, ref, True) == [G] * 6  # the third turn's c is matched against the third turn
    extra = [_s(0, [("a", {})], [True], g=none), _s(1, text="ok"), _s(2, [("z", {})], [True], g=none)]
    assert grounded_labels(extra, ref[:1], True) == [G, G, B]  # a call after the last turn: no reference left


def test_repeats_and_unrecorded_calls():
    ref = [[ToolCall(name="f", arguments={"x": 1})]]
    # a repeat that changed the state and came closer is judged by rule 5, not rule 4
    closer = [_s(0, [("h", {})], [True], g=_g(True, 3, 2)), _s(1, [("h", {})], [True], g=_g(True, 2, 1))]
    assert grounded_labels(closer, ref, False) == [G, G]
    # a repeat without effect is BAD even where the environment reports no state facts
    blind = [_s(0, [("h", {})], [True]), _s(1, [("h", {})], [True])]
    assert grounded_labels(blind, ref, False) == [N, B]
    # calls without a per-call record count as run: a reference call is GOOD
    assert grounded_labels([_s(0, [("f", {"x": 1})])], ref, False) == [G]


def test_self_reference_turns_parse_errors_and_the_threshold():
    from evolvekit.attributing.grounded import self_reference
    from evolvekit.types import Trajectory

    def traj(steps, outcome=1.0):
        return Trajectory(task_id="t", group_id="g", outcome_reward=outcome, steps=steps)

    a, b = ToolCall(name="a"), ToolCall(name="b")
    # a parse error without calls does not end the turn, and the episode goes on after it
    mid = traj([_s(0, [("a", {})], [True]), _s(1, parse_error="bad"), _s(2, [("b", {})], [True]), _s(3, text="x")])
    assert self_reference([mid], 0.5) == [[a, b]]
    two = traj([_s(0, [("a", {})], [True]), _s(1, text="x"), _s(2, [("b", {})], [True]), _s(3, text="y")])
    assert self_reference([two], 0.5) == [[a], [b]]  # the empty turn after the last answer is dropped
    unfinished = traj([_s(0, [("a", {})], [True]), _s(1, text="x"), _s(2, [("b", {})], [True])])
    assert self_reference([unfinished], 0.5) == [[a], [b]]  # a last turn with calls is kept
    assert self_reference([traj([_s(0, text="x")])], 0.5) == [[]]  # solved by the answer alone
    assert self_reference([traj([])], 0.5) == [[]]  # no step at all: one empty turn, not none
    assert self_reference([traj([_s(0, text="x")], outcome=0.5)], 0.5) == [[]]  # at the threshold is a success
    assert self_reference([traj([_s(0, text="x")], outcome=0.4)], 0.5) is None


def test_request_words_are_lower_case_and_the_minimum_is_inclusive():
    from evolvekit.attributing.grounded import most_similar, request_words

    words = request_words("What is 3 PLUS 5?")
    assert {"what", "plus", "#", "?"} <= words and "PLUS" not in words
    assert most_similar(words, {"x": request_words("what is 7 plus 9?")}, 1.0) == ("x", 1.0)


def _seed3_group(tmp_path, first: list[Action]):
    """An all-failed group on a person-written task (gold closed, no success of its own): five rollouts answer in
    text without a call, one runs ``first`` and then answers; every answer is wrong."""
    from evolvekit.orchestrator.stages import IterationContext
    from evolvekit.store.sqlite import RunStore
    from evolvekit.types import Trajectory

    task = _math_task("div-1", "What is 12 divided by 4?", [[ToolCall(name="divide", arguments={"a": 12, "b": 4})]])
    store = RunStore(tmp_path / "run.db")
    with store.transaction() as c:
        store.put_tasks(c, [task], -1)
    runs = [[Action(text="5")]] * 5 + [[*first, Action(text="5")]]
    trajs = [
        Trajectory(task_id=task.task_id, group_id="g", outcome_reward=0.0, steps=_episode(task, actions)[0])
        for actions in runs
    ]
    return IterationContext(iteration=0, seed=0, run_dir=tmp_path, store=store), trajs, store


@pytest.mark.parametrize("answer_from_check", [True, False])
def test_an_all_failed_group_without_a_reference_no_longer_pushes_away_from_tools(tmp_path, answer_from_check):
    """The collapse of grpo_person_nav_attr's seed 3 (benchmarks/results/evidence_env_only.md), rebuilt: with the
    fallback's answers NEUTRAL, one errored call is the only verdict of an all-failed group, so Eq. 18 ranks the five
    text answers above the one rollout that tried a tool. With the answer judged by the environment's check, an
    errored call and a text answer are both failures (the channel is constant: no gradient, as for GRPO), and a call
    that ran cleanly ranks above a bare wrong answer."""
    from evolvekit.attributing.stage import AttributedSamples
    from evolvekit.config import load_config

    cfg = load_config(
        None,
        [
            "attributing.enabled=true",
            "attributing.source=grounded",
            f"attributing.answer_from_check={str(answer_from_check).lower()}",
        ],
    )
    ctx, trajs, store = _seed3_group(tmp_path, [call("no_such_tool", a=12)])  # an errored call
    adv, _ = AttributedSamples.from_config(cfg, None).step_advantages(ctx, trajs)
    texts, tried = [a[0] for a in adv[:5]], adv[5][0]
    if answer_from_check:
        assert texts == [0.0] * 5 and tried == 0.0
    else:
        assert all(x > 0 for x in texts) and tried < 0  # the push away from tools
    store.close()
    ctx, trajs, store = _seed3_group(tmp_path / "clean", [call("divide", a=12, b=3)])  # a clean but wrong call
    adv, _ = AttributedSamples.from_config(cfg, None).step_advantages(ctx, trajs)
    texts, tried = [a[0] for a in adv[:5]], adv[5][0]
    if answer_from_check:
        assert all(x < 0 for x in texts) and tried > 0
    else:
        assert texts == [0.0] * 5 and tried == 0.0  # every step NEUTRAL: constant channel
    store.close()
