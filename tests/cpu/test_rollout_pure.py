"""The episode loop (agent/rollout.py) piece by piece, with no model: the start, one step, the score, the refusals.

Each test drives the loop's own functions on a tiny environment (tests/cpu/episode_doubles.py), so the mutation
look of rollout.py decides its mutants without torch (issue 77.2).
"""

import hashlib
import logging
import re

import pytest
from episode_doubles import TOOLS, ScriptedChat, TinyEnv, logged, tiny_task

from evolvekit.agent import rollout
from evolvekit.agent.rollout import RolloutJob, initial_context, require_a_valid_episode
from evolvekit.agent.templates import ContextEvent, TemplateSettings
from evolvekit.config import RolloutConfig
from evolvekit.engine.base import Engine
from evolvekit.env.action_text import CLOSE, OPEN, format_call
from evolvekit.env.base import CallResult, ResetResult, StepResult
from evolvekit.env.prompts import system_prompt
from evolvekit.errors import EnvError
from evolvekit.llm.base import Completion, SamplingParams
from evolvekit.types import ChatMessage, SpanKind, Step, StepGrounding, TokenSpan, ToolCall, Trajectory

BASIC = TemplateSettings()
ADD = format_call(ToolCall(name="add"))


class _Keyed(TinyEnv):
    """A backend that names its state (GiGPO's anchor): the calls made so far."""

    def state_key(self):
        return "called:" + ",".join(self.called)


class _BadClose(TinyEnv):
    def close(self):
        raise RuntimeError("lost the socket")


class _BadReset(TinyEnv):
    closed = 0

    def reset(self, task=None, sandbox_config=None):
        raise RuntimeError("no sandbox")

    def close(self):
        _BadReset.closed += 1


def _job(query="please add", **kw):
    task = tiny_task("t1", "add").model_copy(update={"query": query})
    return RolloutJob(task=task, group_id="g-7", **kw)


def _step(
    ep,
    text,
    finish="stop",
    prompt=(1, 2, 3),
    token_ids=(4, 5),
    logprobs=(-0.5, -0.25),
    max_steps=5,
    rendering="compact",
):
    comp = Completion(text=text, token_ids=list(token_ids), logprobs=list(logprobs), finish_reason=finish)
    rollout._advance(ep, list(prompt), comp, max_steps, rendering)
    return ep.trajectory.steps[-1]


# -- the start ---------------------------------------------------------------------------------------------------


def test_the_first_context_shows_the_environments_own_system_text_else_its_tools_rendered():
    examples = [ChatMessage(role="user", content="ex q"), ChatMessage(role="assistant", content="ex a")]
    own = initial_context(ResetResult(observation="q", tools=TOOLS, system="Be brief."), "json", BASIC)
    assert own.messages[0].content == "Be brief."
    ctx = initial_context(ResetResult(observation="q", tools=TOOLS, examples=examples), "json", BASIC)
    assert ctx.messages[0].content == system_prompt(TOOLS, "json") != system_prompt(TOOLS, "compact")
    assert [m.content for m in ctx.messages[1:]] == ["ex q", "ex a", "q"]


def test_the_start_renders_the_tools_as_asked_and_records_the_group_and_the_experience():
    ep = rollout._start(_job(experience="use add", experience_ids=("e1", "e2")), TinyEnv, "json", BASIC)
    assert ep.context.messages[0].content.startswith(system_prompt(TOOLS, "json"))
    assert "use add" in ep.context.messages[0].content
    assert ep.trajectory.group_id == "g-7" and ep.trajectory.task_id == "t1"
    assert ep.trajectory.flags.experience_guided and ep.trajectory.experience_used == ["e1", "e2"]
    assert ep.state_key is None  # the tiny environment names no backend state
    plain = rollout._start(_job(), TinyEnv, "compact", BASIC)
    assert not plain.trajectory.flags.experience_guided and plain.trajectory.experience_used == []
    keyed = rollout._start(_job(), _Keyed, "compact", BASIC)
    assert keyed.state_key is not None and keyed.state_key() == "called:"


def test_a_start_that_fails_frees_the_environment_and_is_recorded_with_its_group():
    _BadReset.closed = 0
    with pytest.raises(RuntimeError, match="no sandbox"):
        rollout._start(_job(), _BadReset, "compact", BASIC)
    assert _BadReset.closed == 1
    failed = rollout._failed_start(_job(), RuntimeError("no sandbox"))
    assert failed.flags.failed and failed.group_id == "g-7" and failed.error == "reset: RuntimeError: no sandbox"


def test_closing_quietly_logs_what_close_raised(caplog):
    with caplog.at_level(logging.WARNING, logger="evolvekit.agent.rollout"):
        rollout._close_quietly(_BadClose())
    assert logged(caplog, "evolvekit.agent.rollout") == ["closing an environment raised RuntimeError: lost the socket"]


# -- one step ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, finish, closed",
    [
        (ADD[: -len(CLOSE)], "stop", True),  # stopped on the closing tag, which the text omits: restored
        (ADD[: -len(CLOSE)], "length", False),  # cut by the token limit: left as it is
        (ADD, "stop", False),  # already closed: not doubled
        ("just words", "stop", False),  # no call opened
    ],
)
def test_a_call_cut_at_its_stop_string_gets_its_closing_tag_back(text, finish, closed):
    ep = rollout._start(_job(), TinyEnv, "compact", BASIC)
    step = _step(ep, text, finish=finish)
    assert step.action_text == (text + CLOSE if closed else text)
    assert step.action_text.count(CLOSE) == (1 if OPEN in text else 0) or not closed
    assert step.finish_reason == finish


def test_a_step_is_recorded_with_its_tokens_and_logged_with_its_timing(caplog):
    ep = rollout._start(_job(), TinyEnv, "compact", BASIC)
    span = TokenSpan(kind=SpanKind.EXPERIENCE, start=1, end=2)
    ep.prompt_spans = [span]  # the prompt's recorded segments, as the tokenizer marked them
    with caplog.at_level(logging.DEBUG, logger="evolvekit.agent.rollout"):
        step = _step(ep, "thinking", prompt=(1, 2, 3), token_ids=(4, 5), logprobs=(-0.5, -0.25))
    [snap] = ep.recorder.snapshots
    assert (snap.step_index, snap.prompt_ids, snap.completion_ids, snap.completion_logprobs, snap.prompt_spans) == (
        0,
        (1, 2, 3),
        (4, 5),
        (-0.5, -0.25),
        (span,),
    )
    assert step.prompt_token_ids == [1, 2, 3] and step.completion_token_ids == [4, 5] and step.spans == [span]
    assert step.completion_logprobs == [-0.5, -0.25]
    assert ep.prompt_tokens == 3 and ep.completion_tokens == 2
    [line] = [m for m in caplog.messages if " step 0:" in m]
    m = re.fullmatch(r"t1 step 0: 3 prompt tokens, 2 generated \(stop\), environment (\d+\.\d\d)s", line)
    assert m and float(m.group(1)) < 5.0


def test_each_steps_anchor_is_the_backend_state_and_the_observations_so_far():
    ep = rollout._start(_job(query="please mul"), _Keyed, "compact", BASIC)
    first = _step(ep, "hm")  # text: the environment asks again, nothing called
    second = _step(ep, ADD)
    assert first.state_key == hashlib.sha1(b"called:").hexdigest()
    assert second.state_key == hashlib.sha1(b"called:\x00call a tool").hexdigest()


def test_the_anchor_by_hand_and_on_text_that_is_not_valid_unicode():
    assert rollout.anchor_key(None, []) == hashlib.sha1(b"").hexdigest()
    steps = [Step(index=0, action_text="", observation="a"), Step(index=1, action_text="", observation="b")]
    assert rollout.anchor_key("s", steps) == hashlib.sha1(b"s\x00a\x00b").hexdigest()
    lone = "\ud800"  # a lone surrogate (a backend's bytes decoded with surrogateescape, say): hashed, not refused
    odd = [Step(index=0, action_text="", observation="x" + lone)]  # a step's own text has it replaced
    assert rollout.anchor_key("s" + lone, odd) == hashlib.sha1("s?\x00x\ufffd".encode()).hexdigest()


def test_the_contexts_events_are_recorded_on_the_step_and_cleared():
    ep = rollout._start(_job(), TinyEnv, "compact", BASIC)
    ep.context.events.append(ContextEvent("summarise", "3 messages -> memory"))
    step = _step(ep, "hm")
    assert step.context_events == ["summarise: 3 messages -> memory"] and ep.context.events == []


def test_the_prepared_contexts_decisions_become_trained_steps_with_their_tokens():
    ep = rollout._start(_job(), TinyEnv, "compact", BASIC)
    ep.prompt_tokens, ep.completion_tokens = 10, 1
    decisions = [
        Completion(text="keep", token_ids=[7], logprobs=[-0.1], prompt_token_ids=[1, 2]),
        Completion(text="drop", token_ids=[8, 9], logprobs=[-0.2, -0.3], prompt_token_ids=[3]),
    ]
    ep.context.prepare = lambda llm: ep.context.decisions.extend(decisions)
    rollout._prepare(ep, llm=None)
    got = [(d.before_step, d.prompt_token_ids, d.completion_token_ids, d.completion_logprobs)
           for d in ep.trajectory.context_decisions]  # fmt: skip
    assert got == [(0, [1, 2], [7], [-0.1]), (0, [3], [8, 9], [-0.2, -0.3])]
    assert ep.prompt_tokens == 10 + 3 and ep.completion_tokens == 1 + 3 and ep.context.decisions == []


# -- the refusal of a batch where nothing ran -------------------------------------------------------------------


def _failed(error):
    traj = Trajectory(task_id="t", group_id="g", error=error)
    traj.flags.failed = True
    return traj


def test_a_batch_is_refused_only_when_every_episode_failed_and_names_the_first_error():
    require_a_valid_episode([], "training")  # nothing asked, nothing refused
    require_a_valid_episode([_failed("x"), Trajectory(task_id="t", group_id="g")], "training")
    with pytest.raises(EnvError) as err:
        require_a_valid_episode([_failed(None), _failed("boom\nTraceback ..."), _failed("later")], "training")
    assert str(err.value) == "training: none of the 3 episodes ran; the first error: boom"
    with pytest.raises(EnvError) as err:
        require_a_valid_episode([_failed(None)], "evaluation")
    assert str(err.value) == "evaluation: none of the 1 episodes ran; the first error: no error recorded"
    with pytest.raises(EnvError) as err:
        require_a_valid_episode([_failed("e" * 400)], "evaluation")
    assert str(err.value).endswith(": " + "e" * 300)


# -- a step's record and what the context does next ---------------------------------------------------------------


class _TwoTurns(TinyEnv):
    """Turn 0 wants ``add``; its call opens turn 1 (a user message, a smaller tool list), whose call ends it."""

    def step(self, action):
        names = [c.name for c in action.tool_calls]
        first_call = names and not self.called
        self.called += names
        grounding = StepGrounding(state_changed=True, distance_before=2, distance_after=1)
        results = [CallResult(name=n, ok=n == "add", output="o", unknown_tool=n == "nope") for n in names]
        if first_call:
            return StepResult(observation="now mul", reward=0.5, new_turn=True, turn_index=1, tools=TOOLS[1:],
                              call_results=results, grounding=grounding)  # fmt: skip
        if names:
            return StepResult(observation="bye", reward=1.0, done=True, turn_index=1, call_results=results)
        return StepResult(observation="call a tool", turn_index=len(self.called))


def test_a_step_records_what_the_environment_said_and_the_next_turn_refreshes_the_tools():
    ep = rollout._start(_job(), _TwoTurns, "compact", BASIC)
    first = _step(
        ep, format_call(ToolCall(name="add", arguments={"a": 1})) + format_call(ToolCall(name="nope")), rendering="json"
    )
    assert [c.name for c in first.tool_calls] == ["add", "nope"] and first.parse_error is None
    assert (first.observation, first.reward, first.done, first.turn_index, first.new_turn) == (
        "now mul",
        0.5,
        False,
        1,
        True,
    )
    assert first.grounding == StepGrounding(state_changed=True, distance_before=2, distance_after=1)
    assert [(c.name, c.ok, c.unknown_tool) for c in first.calls] == [("add", True, False), ("nope", False, True)]
    assert first.format_ok is None and first.think_words is None and first.context_events == []
    assert ep.context.messages[0].content == system_prompt(TOOLS[1:], "json")  # the new tool list, rendered as asked
    assert [(m.role, m.content) for m in ep.context.messages[-2:]] == [
        ("assistant", first.action_text),
        ("user", "now mul"),
    ]
    broken = _step(ep, OPEN + "{not json" + CLOSE)
    assert broken.parse_error and broken.tool_calls == [] and not broken.new_turn
    assert ep.context.messages[-1].content == "Tool results:\ncall a tool"  # an observation, not a new user turn
    last = _step(ep, format_call(ToolCall(name="mul")))
    assert last.done and ep.done and not ep.trajectory.flags.truncated
    assert ep.context.messages[-1].content == last.action_text  # nothing follows the last action


def test_a_reasoning_templates_format_check_and_think_words_reach_the_step():
    ep = rollout._start(_job(), TinyEnv, "compact", TemplateSettings(template="reasoning"))
    step = _step(ep, "<think>add one and two</think>" + ADD)
    assert step.format_ok is True and step.think_words == 4 and [c.name for c in step.tool_calls] == ["add"]
    assert step.action_text.startswith("<think>")  # the whole text is the step; the call is parsed after the think


def test_the_step_limit_ends_an_episode_as_truncated():
    ep = rollout._start(_job(query="please mul"), TinyEnv, "compact", BASIC)
    _step(ep, "hm", max_steps=2)
    assert not ep.done and not ep.trajectory.flags.truncated
    _step(ep, "hm", max_steps=2)
    assert ep.done and ep.trajectory.flags.truncated and len(ep.trajectory.steps) == 2


def test_a_prompt_of_no_ids_counts_the_servers_reported_tokens():
    ep = rollout._start(_job(), TinyEnv, "compact", BASIC)
    comp = Completion(text=ADD, usage_prompt_tokens=17, usage_completion_tokens=4)
    rollout._advance(ep, [], comp, 5, "compact")
    assert ep.prompt_tokens == 17 and ep.completion_tokens == 4


# -- the score -----------------------------------------------------------------------------------------------------


class _Searching(TinyEnv):
    def __init__(self):
        super().__init__()
        self.experience_ids_used = ["e2", "e3", "e2"]
        self.closed = False

    def close(self):
        self.closed = True


class _BadScore(_Searching):
    def evaluate(self, trajectory=None):
        raise ValueError("no state")


def test_the_finish_scores_closes_and_merges_the_searched_experience():
    ep = rollout._start(_job(experience="x", experience_ids=("e1", "e2")), _Searching, "compact", BASIC)
    _step(ep, ADD, prompt=(1, 2), token_ids=(3,))
    traj = rollout._finish(ep)
    assert ep.env.closed and traj.outcome_reward == 1.0 and traj.rewards.env == 1.0 and not traj.flags.failed
    assert traj.experience_used == ["e1", "e2", "e3"]  # the injected first, then the searched, each once
    assert (traj.prompt_tokens, traj.completion_tokens, traj.merged_sequences) == (2, 1, 1)
    bad = rollout._start(_job(), _BadScore, "compact", BASIC)
    traj = rollout._finish(bad)
    assert bad.env.closed and traj.flags.failed and traj.error == "evaluate: ValueError: no state"
    assert traj.outcome_reward is None
    skipped = rollout._start(_job(), _BadScore, "compact", BASIC)
    skipped.trajectory.flags.failed, skipped.trajectory.error = True, "earlier"
    assert rollout._finish(skipped).error == "earlier" and skipped.env.closed  # a failed episode is not scored


# -- whole episodes through an engine -------------------------------------------------------------------------------


def test_run_rollouts_samples_one_completion_per_prompt_stopping_at_the_call():
    engine = Engine(ScriptedChat({"please add": [ADD], "please mul": [format_call(ToolCall(name="mul"))]}))
    params = SamplingParams(n=4, temperature=0.7, top_p=0.9, max_new_tokens=33, stop=("\n\n",), seed=5)
    done = []
    jobs = [RolloutJob(task=tiny_task(f"t{i}", "add" if i % 2 else "mul")) for i in range(5)]
    trajs = rollout.run_rollouts(jobs, TinyEnv, engine, RolloutConfig(concurrency=2), params, show_progress=False,
                                 on_done=lambda i, t: done.append((i, t.task_id)))  # fmt: skip
    [p, *_] = engine.llm.params
    assert (p.n, p.temperature, p.top_p, p.max_new_tokens, p.seed) == (1, 0.7, 0.9, 33, 5)
    assert p.stop == ("\n\n", CLOSE) and p.stop_on_balanced_json
    assert [t.task_id for t in trajs] == ["t0", "t1", "t2", "t3", "t4"] and all(t.outcome_reward == 1.0 for t in trajs)
    assert sorted(done) == [(i, f"t{i}") for i in range(5)]
    assert max(engine.llm.batches) == 2  # never more episodes at once than the concurrency


def test_an_episode_whose_context_fails_is_recorded_and_its_environment_freed(monkeypatch):
    envs = []

    def make():
        envs.append(_Searching())
        return envs[-1]

    engine = Engine(ScriptedChat({"please add": [ADD]}))
    gen = rollout.run_episode(engine, _job(), make, "compact", BASIC, 3)
    next(gen)
    gen.close()  # the driver dropped it (its batch failed)
    assert envs[0].closed

    def fail(ep, llm):
        raise RuntimeError("over the limit")

    monkeypatch.setattr(rollout, "_prepare", fail)
    gen = rollout.run_episode(engine, _job(), make, "compact", BASIC, 3)
    with pytest.raises(StopIteration) as end:
        next(gen)
    traj = end.value.value
    assert traj.flags.failed and traj.error == "context: RuntimeError: over the limit" and envs[1].closed


def test_a_step_that_raises_ends_the_episode_with_its_error_and_a_start_that_raises_is_recorded(caplog):
    ep = rollout._start(_job(query="crash"), TinyEnv, "compact", BASIC)
    with caplog.at_level(logging.WARNING, logger="evolvekit.agent.rollout"):
        rollout._advance_safely(ep, [1], Completion(text=ADD), 5, "compact")
    assert ep.done and ep.trajectory.flags.failed and ep.trajectory.error.startswith("RuntimeError: backend died\n")
    assert "Traceback" in ep.trajectory.error and logged(caplog, "evolvekit.agent.rollout") == [
        "rollout of t1 failed: backend died"
    ]
    engine = Engine(ScriptedChat({}))
    gen = rollout.run_episode(engine, _job(), _BadReset, "compact", BASIC, 3)
    with pytest.raises(StopIteration) as end:
        next(gen)
    assert end.value.value.error == "reset: RuntimeError: no sandbox" and end.value.value.group_id == "g-7"


class _Seen(TinyEnv):
    """Keeps the trajectory it was asked to score."""

    scored: list = []

    def evaluate(self, trajectory=None):
        _Seen.scored.append(trajectory)
        return super().evaluate(trajectory)


def test_the_score_is_of_the_episodes_own_trajectory():
    _Seen.scored = []
    ep = rollout._start(_job(), _Seen, "compact", BASIC)
    _step(ep, ADD)
    traj = rollout._finish(ep)
    assert _Seen.scored == [traj] and len(traj.steps) == 1


def _deep(n):
    if n == 0:
        raise RuntimeError("deep")
    _deep(n - 1)


class _Deep(TinyEnv):
    def step(self, action):
        _deep(6)


def test_a_failed_steps_error_keeps_three_frames_of_its_traceback():
    ep = rollout._start(_job(), _Deep, "compact", BASIC)
    rollout._advance_safely(ep, [1], Completion(text=ADD), 5, "compact")
    assert ep.trajectory.error.startswith("RuntimeError: deep\nTraceback")
    assert ep.trajectory.error.count('  File "') == 3


class _Prompted(ScriptedChat):
    """A chat-only server that reports the prompt's token ids with each completion."""

    def chat(self, convs, params):
        out = super().chat(convs, params)
        for [c] in out:
            c.prompt_token_ids = [9, 9, 9]
        return out


def test_rollouts_render_tools_compact_unless_told_and_keep_the_servers_prompt_ids(monkeypatch):
    policy = _Prompted({"please add": [ADD, format_call(ToolCall(name="mul"))]})
    engine = Engine(policy)
    forgotten = []
    sessions_of = engine.sessions

    def sessions(params):
        inner = sessions_of(params)
        real_forget = inner.forget
        inner.forget = lambda key: (forgotten.append(key), real_forget(key))[1]
        return inner

    monkeypatch.setattr(engine, "sessions", sessions)
    [traj] = rollout.run_rollouts([_job()], _TwoTurns, engine, RolloutConfig(), SamplingParams(), show_progress=False)
    assert policy.systems == [system_prompt(TOOLS, "compact"), system_prompt(TOOLS[1:], "compact")]
    assert [s.prompt_token_ids for s in traj.steps] == [[9, 9, 9], [9, 9, 9]]
    assert forgotten == [0]  # the finished episode's session is dropped by its job's index


def test_rollouts_take_the_template_from_the_config_and_show_their_progress(monkeypatch):
    made, shown = [], []
    real_make = rollout.make_context

    def make_context(settings, *args):
        made.append(settings)
        return real_make(settings, *args)

    class _Progress(rollout.StageProgress):
        def __init__(self, what, total, show_bar=True, logger=None):
            shown.append((what, total, show_bar, logger))
            super().__init__(what, total, show_bar=False, logger=logger)

    monkeypatch.setattr(rollout, "make_context", make_context)
    monkeypatch.setattr(rollout, "StageProgress", _Progress)
    engine = Engine(ScriptedChat({"please add": ["<think>go</think>" + ADD]}))
    cfg = RolloutConfig(template="reasoning", context_token_limit=1234)
    rollout.run_rollouts([_job(), _job()], TinyEnv, engine, cfg, SamplingParams())
    assert [(m.template, m.token_limit) for m in made] == [("reasoning", 1234)] * 2
    rollout.run_rollouts([_job()], TinyEnv, engine, cfg, SamplingParams(), show_progress=False)
    assert shown == [("rollouts", 2, True, rollout.log), ("rollouts", 1, False, rollout.log)]
