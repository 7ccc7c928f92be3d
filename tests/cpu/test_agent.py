import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evolvekit.agent.context import SnapshotRecorder
from evolvekit.agent.evaluate import avg_at_k, best_at_k, evaluate_policy
from evolvekit.agent.rollout import RolloutJob, run_rollouts
from evolvekit.config import RolloutConfig
from evolvekit.engine.base import Engine
from evolvekit.env.action_text import format_call, parse_action
from evolvekit.env.bfcl import data
from evolvekit.env.bfcl.env import BfclEnv
from evolvekit.llm.base import Completion, SamplingParams
from evolvekit.types import SpanKind, ToolCall

# -- parser ---------------------------------------------------------------------------------------------------


def test_parser_formats():
    a = parse_action('<tool_call>{"name": "cd", "arguments": {"folder": "x"}}</tool_call>')
    assert a.tool_calls == [ToolCall(name="cd", arguments={"folder": "x"})] and a.parse_error is None
    a = parse_action('I will call it.\n<tool_call>{"name": "ls", "arguments": {}}')  # stopped before closing tag
    assert [c.name for c in a.tool_calls] == ["ls"]
    a = parse_action('<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b"}</tool_call>')
    assert [c.name for c in a.tool_calls] == ["a", "b"]
    a = parse_action('Sure: {"name": "pwd", "arguments": {}}')
    assert [c.name for c in a.tool_calls] == ["pwd"]
    a = parse_action('{"name": "f", "arguments": "{\\"x\\": 1}"}')  # double-encoded arguments
    assert a.tool_calls[0].arguments == {"x": 1}
    assert parse_action("All done, the file is moved.").tool_calls == []
    assert parse_action("All done.").parse_error is None
    assert parse_action('<tool_call>{"name": "cd", "arguments": {"folder": </tool_call>').parse_error
    assert parse_action("<tool_call></tool_call>").parse_error
    assert parse_action('<tool_call>{"arguments": {}}</tool_call>').parse_error
    assert parse_action('<tool_call>{"name": "x", "arguments": [1]}</tool_call>').parse_error
    assert parse_action('The answer is {"value": 3}').tool_calls == []  # JSON that is not a call


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parser_never_raises_on_arbitrary_text(text):
    action = parse_action(text)
    assert action.text == text
    assert not (action.tool_calls and action.parse_error)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(), c, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True),
    st.dictionaries(st.text(), json_values, max_size=4),
    st.text(alphabet=st.characters(blacklist_characters="<{["), max_size=30),
)
def test_parser_round_trips_formatted_calls(name, args, prefix):
    call = ToolCall(name=name, arguments=args)
    action = parse_action(prefix + format_call(call))
    assert action.tool_calls == [call]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_parser_truncated_call_is_an_error_or_a_call(tail):
    action = parse_action('<tool_call>{"name": "cd", "arguments": {"folder": ' + json.dumps(tail)[:-1])
    assert action.parse_error is not None and action.tool_calls == []


# -- snapshot recorder ----------------------------------------------------------------------------------------


def test_snapshot_merge_shares_prefixes_and_masks_policy_tokens():
    rec = SnapshotRecorder()
    rec.record(0, [1, 2, 3], [10, 11], [-0.1, -0.2])
    rec.record(1, [1, 2, 3, 10, 11, 4, 5], [12], [-0.3])  # extends the previous sequence
    rec.record(2, [1, 2, 9], [13, 14], [-0.4, -0.5])  # history rewritten: new sequence
    seqs = rec.merge()
    assert len(seqs) == 2
    a, b = seqs
    assert a.token_ids == [1, 2, 3, 10, 11, 4, 5, 12]
    assert a.loss_mask == [0, 0, 0, 1, 1, 0, 0, 1]
    assert a.logprobs == [0, 0, 0, -0.1, -0.2, 0, 0, -0.3]
    assert a.step_spans == {0: (3, 5), 1: (7, 8)}
    assert [s.kind for s in a.spans] == [SpanKind.PROMPT, SpanKind.POLICY, SpanKind.PROMPT, SpanKind.POLICY]
    assert b.token_ids == [1, 2, 9, 13, 14] and b.loss_mask == [0, 0, 0, 1, 1] and b.step_spans == {2: (3, 5)}


# -- metrics --------------------------------------------------------------------------------------------------


def test_avg_and_best_at_k():
    scores = [[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]
    assert avg_at_k(scores) == pytest.approx((0.25 + 0 + 1) / 3)
    assert best_at_k(scores) == pytest.approx(2 / 3)
    assert avg_at_k([]) == best_at_k([]) == 0.0


# -- rollouts with a scripted policy (a unit-test double) ----------------------------------------------------


class ScriptedLLM:
    """Replays the reference solution of a task as tool-call text, one call per step, "Done." ending each turn."""

    name = "scripted"

    def __init__(self, task):
        self.plan = []
        for turn in task.reference_solution:
            self.plan += [format_call(c) for c in turn] + ["Done."]
        self.batch_sizes = []

    def apply_chat_template(self, messages, add_generation_prompt=True):
        return [hash(m.content) % 1000 for m in messages]

    def generate_ids(self, prompts, params):
        self.batch_sizes.append(len(prompts))
        out = []
        for p in prompts:
            i = (len(p) - 2) // 2  # messages: system, user, then (assistant, user) pairs
            text = self.plan[i] if i < len(self.plan) else "Done."
            out.append([Completion(text=text, token_ids=[7, 8], logprobs=[-0.1, -0.1], prompt_token_ids=list(p))])
        return out


def test_rollouts_batch_and_complete_and_score():
    task = next(t for t in data.load_tasks("multi_turn_base") if t.task_id == "multi_turn_base_0")
    llm = ScriptedLLM(task)
    cfg = RolloutConfig(max_steps=30, concurrency=4)
    trajs = run_rollouts(
        [RolloutJob(task=task) for _ in range(4)], BfclEnv, Engine(llm), cfg, SamplingParams(), show_progress=False
    )
    assert len(trajs) == 4 and all(t.outcome_reward == 1.0 for t in trajs)
    assert max(llm.batch_sizes) == 4  # the four episodes were generated in one batch
    steps = trajs[0].steps
    assert steps[0].tool_calls and steps[0].completion_token_ids == [7, 8]
    report, _ = evaluate_policy([task], BfclEnv, Engine(ScriptedLLM(task)), cfg, SamplingParams(), k=2)
    assert report.summary()["avg@2"] == 1.0 and report.summary()["best@2"] == 1.0


def test_each_step_logs_its_prompt_and_generated_tokens(caplog):
    """Issue 54 (cost model of long environments): every step's prompt and generated token counts are logged (at
    DEBUG, with the environment's time), and the evaluation's per-task record carries each episode's totals."""
    task = next(t for t in data.load_tasks("multi_turn_base") if t.task_id == "multi_turn_base_0")
    cfg = RolloutConfig(max_steps=2, concurrency=1)
    with caplog.at_level(logging.DEBUG, logger="evolvekit.agent.rollout"):
        report, [traj] = evaluate_policy(
            [task], BfclEnv, Engine(ScriptedLLM(task)), cfg, SamplingParams(), k=1, show_progress=False
        )
    lines = [r.getMessage() for r in caplog.records if " step " in r.getMessage()]
    prompts = [len(s.prompt_token_ids) for s in traj.steps]
    assert len(lines) == 2 and prompts[1] > prompts[0]
    for i, (line, n) in enumerate(zip(lines, prompts)):
        assert line.startswith(f"{task.task_id} step {i}: {n} prompt tokens, 2 generated (")
        assert "environment" in line
    [row] = report.per_task
    assert row["prompt_tokens"] == [sum(prompts)] and row["completion_tokens"] == [4]


def test_step_limit_truncates_and_a_failing_rollout_does_not_stop_others():
    task = next(t for t in data.load_tasks("multi_turn_base") if t.task_id == "multi_turn_base_0")

    class Flaky(BfclEnv):
        calls = 0

        def reset(self, task=None, sandbox_config=None):
            Flaky.calls += 1
            if Flaky.calls == 2:
                raise RuntimeError("environment crashed")
            return super().reset(task, sandbox_config)

    cfg = RolloutConfig(max_steps=3, concurrency=3)
    trajs = run_rollouts(
        [RolloutJob(task=task) for _ in range(3)],
        Flaky,
        Engine(ScriptedLLM(task)),
        cfg,
        SamplingParams(),
        show_progress=False,
    )
    assert len(trajs) == 3
    crashed = [t for t in trajs if t.flags.failed]
    assert len(crashed) == 1 and "environment crashed" in crashed[0].error
    ok = [t for t in trajs if not t.flags.failed]
    assert all(t.flags.truncated and len(t.steps) == 3 and t.outcome_reward == 0.0 for t in ok)


def test_evaluation_writes_each_episode_and_an_interrupted_one_continues(tmp_path):
    """Issue 54 (3): Ctrl-C after 37 minutes of `eval` lost everything. Each episode is now journalled as it finishes;
    a re-run with the same journal runs only the episodes it lacks (a line cut by the interruption included), and a
    journal of another evaluation is refused, not overwritten."""
    from evolvekit.agent.evaluate import EpisodeJournal
    from evolvekit.errors import EnvError

    task = next(t for t in data.load_tasks("multi_turn_base") if t.task_id == "multi_turn_base_0")
    cfg = RolloutConfig(max_steps=30, concurrency=2)
    started = []

    class Counting(BfclEnv):
        def reset(self, task=None, sandbox_config=None):
            started.append(1)
            return super().reset(task, sandbox_config)

    path = tmp_path / "res.episodes.jsonl"
    first, trajs = evaluate_policy(
        [task], Counting, Engine(ScriptedLLM(task)), cfg, SamplingParams(), k=3, show_progress=False,
        journal=EpisodeJournal(path, "key-a"),
    )  # fmt: skip
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"evaluation": "key-a"} and len(lines) == 4 and len(started) == 3
    assert sorted(json.loads(ln)["job"] for ln in lines[1:]) == [0, 1, 2]
    # an interruption: the last episode's line was cut half-way
    path.write_text("\n".join(lines[:3]) + "\n" + lines[3][: len(lines[3]) // 2])
    started.clear()
    again, trajs2 = evaluate_policy(
        [task], Counting, Engine(ScriptedLLM(task)), cfg, SamplingParams(), k=3, show_progress=False,
        journal=EpisodeJournal(path, "key-a"),
    )  # fmt: skip
    assert len(started) == 1 and len(trajs2) == 3  # only the lost episode ran again
    assert again.summary() == first.summary()
    with pytest.raises(EnvError, match="holds episodes of another evaluation"):
        EpisodeJournal(path, "key-b")


def test_a_text_action_environment_ends_each_generation_at_its_action_stop():
    """Issue 54 (long environments): ScienceWorld's action is one line, so the policy's rollouts and evaluation stop
    generating at the newline instead of running to models.policy.max_new_tokens; tool-call environments add none."""
    from evolvekit.agent.parts import policy_sampling
    from evolvekit.config import load_config
    from evolvekit.env.registry import action_stop

    sw = load_config(None, ["env.name=scienceworld", "env.family=null"])
    assert action_stop(sw.env) == ("\n",)
    params = policy_sampling(sw, seed=3)
    assert params.stop == ("\n",) and params.seed == 3
    assert params.max_new_tokens == 32 < sw.models.policy.max_new_tokens  # its registered action length
    longer = load_config(None, ["env.name=scienceworld", "env.family=null", "env.action_max_tokens=64"])
    assert policy_sampling(longer).max_new_tokens == 64
    short = load_config(None, ["env.name=scienceworld", "env.family=null", "models.policy.max_new_tokens=16"])
    assert policy_sampling(short).max_new_tokens == 16  # never above the policy's own limit
    default = load_config(None, [])
    assert policy_sampling(default).stop == ()
    assert policy_sampling(default).max_new_tokens == default.models.policy.max_new_tokens


def test_eval_minutes_extrapolate_the_first_episodes_pace_within_a_range_under_3x():
    """Issue 78.3: the minutes left at the pace of the episodes that finished, with a range whose ends are within 3x
    of each other (so of the truth, when it is inside)."""
    from evolvekit.agent.evaluate import ESTIMATE_SPREAD, eval_minutes, pace_sample

    point, low, high = eval_minutes(30.0, 10, 50)  # 3 s an episode, 40 left: 2 min
    assert point == pytest.approx(2.0) and (low, high) == pytest.approx((2.0 / ESTIMATE_SPREAD, 2.0 * ESTIMATE_SPREAD))
    assert high / low < 3.0
    assert eval_minutes(12.0, 4, 4) == (0.0, 0.0, 0.0)  # nothing left to run
    assert pace_sample(128, 8) == 13 and pace_sample(40, 8) == 8 and pace_sample(6, 8) == 6  # a tenth, a wave, all


def test_the_estimate_is_logged_once_from_the_evaluations_own_episodes(caplog):
    """PaceEstimate runs no episode: it counts the evaluation's own as they finish and logs once, after the wave."""
    from evolvekit.agent.evaluate import PaceEstimate

    now = [100.0]
    pace = PaceEstimate(20, 4, clock=lambda: now[0])
    pace.start()
    with caplog.at_level(logging.INFO, logger="evolvekit.agent.evaluate"):
        for _ in range(20):
            now[0] += 6.0  # an episode finishes every 6 s
            pace()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("estimate:")]
    assert lines == [
        "estimate: the first 4 of 20 episodes took 24.0 s, so the other 16 take about 1.6 min (0.9-2.7 min if they "
        "are like the first; --no-estimate skips this line)"
    ]
    assert pace.logged == pytest.approx((1.6, 1.6 / 1.7, 1.6 * 1.7))
    single = PaceEstimate(4, 8, clock=lambda: now[0])  # one wave is all of it: the progress line says the rest
    single.start()
    for _ in range(4):
        single()
    assert single.logged is None
