"""Curiosity-driven exploration (questioning/explore.py, AgentEvolver §3.1, Eq. 8-9) without a model: the phase
and the context window, the untried tools and the tool a breadth step names per run, the explorer's messages and
call prefixes, the sampling parameters and their seeds, and the exploration loop (resets that fail, replies without
a call, an environment that raises, episodes that end) with a stand-in LLM and environment."""

from __future__ import annotations

from functools import partial

import pytest
from test_questioning import PERSON, _explorer_answer, _Scripted

from evolvekit.config import EnvConfig, load_config
from evolvekit.engine.base import ConstrainedDecode, Engine
from evolvekit.env.action_text import CLOSE, format_call
from evolvekit.env.base import CallResult, EntityProfile, EnvProfile, ResetResult, StepResult, ToolSchema
from evolvekit.env.prompts import system_prompt
from evolvekit.env.registry import make_env
from evolvekit.errors import EnvError
from evolvekit.llm.base import Completion, SamplingParams
from evolvekit.questioning.explore import (
    BREADTH_HINT,
    DEPTH_HINT,
    OPEN_NAME,
    ExplorationStep,
    ExplorationTrace,
    Explorer,
    breadth_tool,
    call_prefix,
    context_window,
    explorer_messages,
    opened_call,
    phase,
    profile_text,
    step_hint,
    untried_tools,
)
from evolvekit.questioning.pipeline import SynthesisSettings
from evolvekit.types import ChatMessage, Task, ToolCall

TOOLS = [ToolSchema(name=n) for n in ("ls", "cd", "cat", "rm")]


def _step(i, name, ok=True, obs="out"):
    return ExplorationStep(i, f"call {name}", [ToolCall(name=name)], obs, ok)


def test_eq_9_phase_and_window():
    assert [phase(i, 2) for i in range(4)] == ["breadth", "breadth", "depth", "depth"]
    steps = [_step(i, "ls") for i in range(5)]
    assert context_window(steps, 1, 2, 3) == steps  # breadth: everything
    assert context_window(steps, 2, 2, 3) == steps[-3:]  # depth: the last N_d
    assert context_window(steps, 2, 2, 0) == []


def test_untried_tools_count_only_calls_that_worked_and_runs_start_n_breadth_apart():
    steps = [_step(0, "ls"), _step(1, "cd", ok=False)]
    assert untried_tools(TOOLS, steps) == ["cd", "cat", "rm"]
    untried = ["a", "b", "c", "d", "e"]
    assert [breadth_tool(untried, i, 2, 0) for i in range(3)] == ["a", "b", "c"]
    assert [breadth_tool(untried, i, 2, 1) for i in range(3)] == ["c", "d", "e"]
    assert breadth_tool(untried, 2, 2, 2) == "b"  # (2·2 + 2) mod 5


def test_profile_text_lists_entities_and_at_most_20_attributes():
    attrs = [f"a{i}" for i in range(25)]
    profile = EnvProfile(env_name="x", name="files", description="a file system")
    profile.entities.append(EntityProfile(name="file", description="a file", attributes=attrs))
    text = profile_text([profile, EnvProfile(env_name="x", name="net", description="network")])
    assert text == (
        "Environment: files: a file system\n"
        f"- entity file: a file; attributes: {', '.join(attrs[:20])}\n"
        "Environment: net: network"
    )


def test_the_hint_names_an_untried_tool_in_breadth_and_builds_on_results_in_depth():
    steps = [_step(0, "ls")]
    assert step_hint(TOOLS, steps, 1, 2) == BREADTH_HINT + " Try `cat`."  # untried: cd, cat, rm; (0·2 + 1) mod 3
    assert step_hint(TOOLS, steps, 1, 2, run=1) == BREADTH_HINT + " Try `cd`."  # (1·2 + 1) mod 3
    assert step_hint(TOOLS, steps, 0, 3) == BREADTH_HINT + " Try `ls`."  # only the steps before step 0 count
    every = [_step(i, t.name) for i, t in enumerate(TOOLS)]
    assert step_hint(TOOLS, every, 4, 9) == BREADTH_HINT  # all tried: no name
    assert step_hint(TOOLS, steps, 3, 3) == DEPTH_HINT


def test_the_call_prefix_opens_the_named_tool_in_breadth_and_leaves_the_choice_in_depth():
    assert opened_call(TOOLS[2]) == 'cat", "arguments":'
    assert call_prefix(TOOLS, [], 0, 2) == OPEN_NAME + opened_call(TOOLS[0])
    assert call_prefix(TOOLS, [], 1, 2, run=1) == OPEN_NAME + opened_call(TOOLS[3])  # (1·2 + 1) mod 4
    assert call_prefix(TOOLS, [], 2, 2) == OPEN_NAME
    every = [_step(i, t.name) for i, t in enumerate(TOOLS)]
    assert call_prefix(TOOLS, every, 1, 2) == OPEN_NAME  # nothing untried


def test_the_explorer_messages_are_rendered_as_first_shown_so_each_is_a_prefix_of_the_next():
    profile = [EnvProfile(env_name="x", name="files", description="d")]
    example = [ChatMessage(role="user", content="ex")]
    steps = [_step(0, "ls", obs="a b"), _step(1, "cd", obs="ok"), _step(2, "cat", obs="text")]
    kw = dict(rendering="json", examples=example, goal="Find a file.", run=1, start="  files: a b  ")
    m1 = explorer_messages(TOOLS, profile, steps, 1, 3, 1, **kw)  # both breadth (N_b = 3): the whole history
    m2 = explorer_messages(TOOLS, profile, steps, 2, 3, 1, **kw)
    assert m2[: len(m1)] == m1 and len(m2) == len(m1) + 2
    assert m1[0].content == system_prompt(TOOLS, "json") + "\n\n" + profile_text(profile)
    assert m1[1] == example[0]
    intro = "You are exploring this environment to learn what it can do. files: a b\nFind a file.\n"
    assert m1[2].content == intro + step_hint(TOOLS, steps, 0, 3, run=1)
    assert (m1[3].role, m1[3].content) == ("assistant", "call ls")
    assert m1[4].content == "Tool results:\na b\n\n" + step_hint(TOOLS, steps, 1, 3, run=1)
    assert step_hint(TOOLS, steps, 0, 3, run=1) != step_hint(TOOLS, steps, 0, 3)  # the run's own tool
    later = explorer_messages(TOOLS, profile, steps, 1, 2, 1, run=1)[-1].content
    assert later.endswith("Try `cd`.")  # after ls, run 1 of N_b = 2: (1·2 + 1) mod 3; run 0 would name cat
    # depth with N_d = 1: the window keeps the last step; the first message's hint is that step's
    m3 = explorer_messages(TOOLS, profile, steps, 3, 2, 1, **kw)
    assert m3[2].content == intro + DEPTH_HINT and [m.content for m in m3[3:]] == [
        "call cat",
        "Tool results:\ntext\n\n" + DEPTH_HINT,
    ]
    bare = explorer_messages(TOOLS, profile, [], 0, 2, 1)
    assert bare[0].content == system_prompt(TOOLS, "compact") + "\n\n" + profile_text(profile)  # the default
    assert bare[1].content == "You are exploring this environment to learn what it can do. " + step_hint(
        TOOLS, [], 0, 2
    )


def test_the_explorer_samples_one_reply_per_run_that_stops_at_the_call_and_offsets_its_seeds():
    explorer = Explorer(
        Engine(_LLM([])), SamplingParams(temperature=1.3, top_p=0.8, max_new_tokens=40, stop=("x",), seed=7)
    )
    p = explorer.params
    assert (p.n, p.temperature, p.top_p, p.max_new_tokens, p.stop, p.seed, p.stop_on_balanced_json) == (
        1, 1.3, 0.8, 40, ("x", CLOSE), 7, True,
    )  # fmt: skip
    assert (explorer.n_breadth, explorer.n_depth, explorer.rendering, explorer.scaffold, explorer.show_start) == (
        3, 27, "compact", False, True,
    )  # fmt: skip
    explorer.start_round(5)
    assert explorer.params.seed == 12
    explorer.start_round(6)
    assert explorer.params.seed == 13  # from the role's seed, not the last round's
    unseeded = Explorer(Engine(_LLM([])), SamplingParams(seed=None))
    unseeded.start_round(5)
    assert unseeded.params.seed is None
    assert not Explorer(
        Engine(_LLM([])), SamplingParams(), scaffold=True
    ).scaffold  # a chat-only backend cannot continue


class _LLM:
    name = "stand-in"

    def __init__(self, replies):
        self.replies, self.calls = list(replies), []

    def chat(self, convs, params):
        self.calls.append((convs, params))
        return [[Completion(text=self.replies.pop(0))] for _ in convs]


class _Env:
    def __init__(self, fail_reset=False, raise_on=None, done_after=None):
        self.fail_reset, self.raise_on, self.done_after = fail_reset, raise_on, done_after
        self.steps, self.closed, self.sandboxes = 0, False, []

    def reset(self, task, sandbox):
        self.sandboxes.append(sandbox)
        if self.fail_reset:
            raise RuntimeError(self.fail_reset if isinstance(self.fail_reset, str) else "no sandbox")
        return ResetResult(observation="files: a", tools=TOOLS, examples=[ChatMessage(role="user", content="ex")])

    def profile(self):
        return [EnvProfile(env_name="x", name=n) for n in ("files", "net")]

    def step(self, action):
        self.steps += 1
        if self.raise_on == self.steps:
            raise RuntimeError("backend died")
        names = [c.name for c in action.tool_calls]
        results = [CallResult(name=n, ok=n != "rm", output="o") for n in names]
        return StepResult(observation=f"ran {names}", call_results=results, done=self.done_after == self.steps)

    def close(self):
        self.closed = True


def _call(name):
    return format_call(ToolCall(name=name))


def test_the_exploration_loop_keeps_every_step_and_ends_each_run_on_its_own():
    envs = [_Env(), _Env(fail_reset=True), _Env(raise_on=1), _Env(done_after=1)]
    made = iter(envs)
    # step 0: runs 0, 2, 3 (run 1 never started); step 1: runs 0 and 2 (3 ended); step 2: run 0 (2 raised)
    replies = [_call("ls"), "just text", _call("cat"), _call("rm")[: -len(CLOSE)], _call("cd"), _call("ls")]
    llm = _LLM(replies)
    explorer = Explorer(Engine(llm), SamplingParams(seed=3), n_breadth=1, n_depth=1, rendering="json")
    traces = explorer.explore(lambda: next(made), {"classes": ["files"]}, runs=4, max_steps=3, goal="g")
    assert [len(c[0]) for c in llm.calls] == [3, 2, 1]
    assert [c[1].seed for c in llm.calls] == [3, 4, 5]  # each step its own seed
    run0, run1, run2, run3 = traces
    assert [(s.index, s.tool_calls, s.ok) for s in run0.steps] == [
        (0, [ToolCall(name="ls")], True), (1, [ToolCall(name="rm")], False), (2, [ToolCall(name="ls")], True),
    ]  # fmt: skip
    assert run0.steps[1].action_text == _call("rm")  # an unclosed call is closed, and recorded as executed
    assert run0.successful_calls() == [(0, ToolCall(name="ls"), "ran ['ls']"), (2, ToolCall(name="ls"), "ran ['ls']")]
    assert run1.error == "reset: no sandbox" and run1.steps == []
    assert [(s.action_text, s.tool_calls, s.observation, s.ok) for s in run2.steps] == [
        ("just text", [], "(no tool call)", False)
    ] and run2.error == "step: backend died"
    assert len(run3.steps) == 1 and run3.error is None  # done after one step
    assert all(t.sandbox == {"classes": ["files"]} for t in traces)
    assert all(e.sandboxes == [{"classes": ["files"]}] for e in envs)  # each reset from the sandbox
    assert len({t.exploration_id for t in traces}) == 4 and all(t.exploration_id.startswith("explore") for t in traces)
    assert llm.calls[0][0][1][2].content.endswith("Try `cat`.")  # run 2's first hint: (2·1 + 0) mod 4
    assert llm.calls[0][0][0][0].content.startswith(system_prompt(TOOLS, "json"))
    assert all(e.closed for e in envs if not e.fail_reset) and not envs[1].closed
    first = llm.calls[0][0][0]
    assert "Environment: files" in first[0].content and "Environment: net" not in first[0].content  # the class filter
    assert first[1].content == "ex" and "files: a\ng\n" in first[2].content  # examples, the start, the goal


def test_an_exploration_that_cannot_start_anywhere_is_one_clear_error():
    made = iter([_Env(fail_reset="no sandbox 1"), _Env(fail_reset="no sandbox 2")])
    first_error = r"^exploration: none of the 2 episodes started; the first error: reset: no sandbox 1$"
    with pytest.raises(EnvError, match=first_error):
        Explorer(Engine(_LLM([])), SamplingParams()).explore(lambda: next(made), {}, runs=2, max_steps=3)
    hidden = Explorer(Engine(_LLM([_call("ls")])), SamplingParams(), show_start=False)
    hidden.explore(lambda: _Env(), {}, runs=1, max_steps=1)
    intro = "You are exploring this environment to learn what it can do. "
    assert hidden.engine.llm.calls[0][0][0][2].content == intro + step_hint(TOOLS, [], 0, 3)  # no start line
    assert ExplorationTrace("e", {}).successful_calls() == []


def test_a_first_run_that_cannot_start_leaves_the_others_and_every_run_may_end_early():
    envs = [_Env(fail_reset=True), _Env(done_after=1)]
    made = iter(envs)
    llm = _LLM([_call("ls")])
    traces = Explorer(Engine(llm), SamplingParams()).explore(lambda: next(made), {}, runs=2, max_steps=5)
    assert traces is not None and [len(t.steps) for t in traces] == [0, 1]  # the loop stops when no run is left
    assert len(llm.calls) == 1 and envs[1].closed


class _Batch:
    """A decode batch's stand-in: records what is added and answers each key's continuation."""

    def __init__(self, answer):
        self.answer, self.added, self.params, self.generator = answer, [], None, None

    def add(self, rows, text_prefixes, constraints):
        self.added.append((list(rows), list(text_prefixes), list(constraints)))

    def run(self):
        rows, prefixes, _ = self.added[-1]
        return {k: Completion(text=self.answer(prefix)) for (k, _), prefix in zip(rows, prefixes)}


class _Local:
    """An in-process model's stand-in for the scaffold: a chat template, an encoder and one decode batch."""

    name = "local"

    def __init__(self, answer):
        self.batch, self.batches = _Batch(answer), []

    def decode_batch(self, params, keep_rows=False):
        self.batches.append((params, keep_rows))
        return self.batch

    def apply_chat_template(self, messages):
        return [len(messages)]

    def encode(self, text):
        return [ord(c) for c in text]


def _scaffolded(answer, **kw):
    local = _Local(answer)
    explorer = Explorer(Engine(local), SamplingParams(seed=2), scaffold=True, **kw)  # type: ignore[arg-type]
    assert explorer.scaffold and explorer.engine.llm is local
    return explorer, local


def test_the_scaffold_continues_each_runs_opened_call_under_its_constraint_in_one_kept_batch(monkeypatch):
    explorer, local = _scaffolded(lambda prefix: " {}}" if prefix != OPEN_NAME else 'cd", "arguments": {}}')
    seen = []
    monkeypatch.setattr(explorer, "_constraint", lambda prefix, tools: seen.append((prefix, tools)) or f"c:{prefix}")
    traces = explorer.explore(lambda: _Env(), {}, runs=2, max_steps=4)
    assert local.batches == [(explorer.params, True)]  # one batch that keeps its rows across steps
    batch = local.batch
    assert len(batch.added) == 4 and batch.params.seed == 2 + 3  # the last step's seed
    assert batch.generator is not None and batch.generator.initial_seed() == 5
    rows, prefixes, constraints = batch.added[0]
    assert [k for k, _ in rows] == [0, 1] and prefixes == [
        OPEN_NAME + opened_call(TOOLS[0]),
        OPEN_NAME + opened_call(TOOLS[3]),
    ]
    assert [ids for _, ids in rows] == [[3] + local.encode(p) for p in prefixes]  # the template, then the prefix
    assert constraints == [f"c:{p}" for p in prefixes] and seen[0] == (prefixes[0], TOOLS)
    assert batch.added[3][1] == [OPEN_NAME, OPEN_NAME]  # depth: the model chooses the tool
    calls = [[c.name for s in t.steps for c in s.tool_calls] for t in traces]
    # prefix + continuation, parsed and run; rm fails in this stand-in, so it stays untried for run 1
    assert calls == [["ls", "cat", "cd", "cd"], ["rm", "ls", "rm", "cd"]]


def test_the_scaffold_constraint_is_the_tool_choice_in_depth_and_the_named_tools_arguments_in_breadth(monkeypatch):
    explorer, _ = _scaffolded(lambda prefix: "")
    monkeypatch.setattr(explorer, "_call_trie", lambda tools: ("trie", tuple(t.name for t in tools)))
    monkeypatch.setattr(explorer, "_arguments", lambda tool: ("args", tool.name))
    assert explorer._constraint(OPEN_NAME, TOOLS) == ("trie", ("ls", "cd", "cat", "rm"))
    assert explorer._constraint(OPEN_NAME + opened_call(TOOLS[2]), TOOLS) == ("args", "cat")
    assert explorer._constraint(OPEN_NAME + opened_call(ToolSchema(name="gone")), TOOLS) is None
    assert explorer._constraint(OPEN_NAME, []) is None and explorer._constraint(OPEN_NAME, None) is None
    unseeded = Explorer(Engine(_Local(lambda p: "")), SamplingParams(seed=None), scaffold=True)  # type: ignore[arg-type]
    batch = _Batch(lambda p: "")
    monkeypatch.setattr(unseeded, "_constraint", lambda prefix, tools: None)
    decode = ConstrainedDecode(batch, unseeded.params)  # what Engine.constrained opens over the backend's batch
    assert unseeded._generate([[]], [OPEN_NAME], 0, [7], decode, [TOOLS]) == [OPEN_NAME]
    assert batch.generator is None and batch.params.seed is None  # an unseeded explorer stays unseeded
    assert unseeded._generate([[]], ["x"], 0, [7], decode) == ["x"]  # no tools given: one None per key


def test_a_run_that_raises_leaves_the_later_runs_of_its_step_and_a_step_may_hold_several_calls():
    envs = [_Env(raise_on=1), _Env()]
    made = iter(envs)
    two = _call("ls") + _call("cd")
    llm = _LLM([_call("ls"), two, "no call"])
    traces = Explorer(Engine(llm), SamplingParams()).explore(lambda: next(made), {}, runs=2, max_steps=2)
    assert traces[0].error == "step: backend died"
    assert [(s.index, s.action_text, [c.name for c in s.tool_calls]) for s in traces[1].steps] == [
        (0, two, ["ls", "cd"]),  # both calls, written back to back
        (1, "no call", []),  # a step without a call keeps its index
    ]
    assert not Explorer(Engine(_Local(lambda p: "")), SamplingParams()).scaffold  # the scaffold is off unless asked for


def _walk(trie, ids):
    node = trie
    for t in ids:
        node = node.children[t]
    return node


def test_the_scaffold_builds_its_constraints_from_the_real_tokenizer_once(smollm2, monkeypatch):
    from evolvekit.llm.constrain import SchemaConstraint

    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    tools = [ToolSchema(name="ls", parameters=schema), ToolSchema(name="cd")]
    explorer = Explorer(Engine(smollm2), SamplingParams(seed=1), scaffold=True)
    assert explorer.scaffold and explorer._tries == {} and explorer._vocab is None and explorer._close is None
    named = Explorer(Engine(smollm2), SamplingParams(seed=1), scaffold=True)
    monkeypatch.setattr(named, "_arguments", lambda tool: f"args of {tool.name}")
    trie = named._call_trie(tools)
    assert named._call_trie(list(reversed(tools))) is trie  # one trie per set of tool names
    assert named._call_trie(tools[:1]) is not trie  # another set, its own trie
    for tool in tools:  # each real tool's opened call, in the model's tokens, then that tool's arguments
        end = _walk(trie, smollm2.encode(opened_call(tool)))
        assert end.end and end.then() == f"args of {tool.name}"
    constraint = explorer._arguments(tools[0])
    vocab = explorer._vocab
    assert isinstance(constraint, SchemaConstraint) and vocab is not None and explorer._close is not None
    assert _walk(explorer._close, smollm2.encode("}")).end  # the call's own closing brace follows the arguments
    assert constraint.then is not None and constraint.then() is explorer._close
    assert isinstance(explorer._arguments(tools[1]), SchemaConstraint)  # no parameters: an empty object
    assert explorer._vocab is vocab  # the vocabulary is built once


def _feed(llm, constraint, text: str):
    """Feeds ``text``'s tokens through an argument constraint, each checked against its mask first: ("done", what
    the constraint makes follow), ("refused", the token) or ("ended", None) when it ended before the text did."""
    from evolvekit.llm.constrain import SchemaConstraint

    for token in llm.encode(text):
        if not isinstance(constraint, SchemaConstraint):
            return "ended", constraint
        if not constraint.mask()[token]:
            return "refused", token
        constraint = constraint.advance(token)
    return "done", constraint


@pytest.mark.parametrize(
    ("parameters", "accepted"),
    [  # a schema without "type" is still an object with only its own arguments; no parameters: the empty object
        ({"properties": {"a": {"type": "integer"}}, "required": ["a"]}, ' {"a": 5}'),
        (None, " {}"),
    ],
)
def test_the_scaffold_accepts_exactly_the_arguments_the_tools_schema_allows(smollm2, parameters, accepted):
    tool = ToolSchema(name="ls", parameters=parameters) if parameters else ToolSchema(name="cd")
    before = dict(tool.parameters or {})
    explorer = Explorer(Engine(smollm2), SamplingParams(seed=1), scaffold=True)
    outcome, then = _feed(smollm2, explorer._arguments(tool), accepted)
    assert outcome == "done" and then is explorer._close  # the arguments, then the call's closing brace
    for text in (' {"a": 5}', " {}", ' {"b": 5}', ' {"a": "x"}', " []", " 5"):  # not an object, or other arguments
        if text != accepted:
            assert _feed(smollm2, explorer._arguments(tool), text)[0] == "refused", text
    assert dict(tool.parameters or {}) == before  # the tool's own schema is not rewritten


# -- the scaffold, the explorer's sandboxes and targeted synthesis's parsing (moved from test_questioning.py) --
def test_breadth_hint_names_an_untried_tool():
    from evolvekit.env.base import ToolSchema

    tools = [ToolSchema(name="add"), ToolSchema(name="divide")]
    done = [ExplorationStep(0, "x", [ToolCall(name="add", arguments={})], "ok", True)]
    assert "Try `divide`" in explorer_messages(tools, [], done, 1, 3, 4)[-1].content
    assert "Try `" not in explorer_messages(tools, [], done * 5, 5, 3, 4)[-1].content  # depth phase: no nudge


def test_scaffold_call_prefix_names_an_untried_tool_then_lets_the_model_choose():
    from evolvekit.questioning.explore import ExplorationStep, call_prefix
    from evolvekit.types import ToolCall

    class T:
        def __init__(self, name):
            self.name = name

    tools = [T("add"), T("subtract")]
    done = [ExplorationStep(0, "", [ToolCall(name="add", arguments={})], "ok", True)]
    # the name, up to the arguments object (decoded under the tool's schema)
    assert call_prefix(tools, done, 1, n_breadth=3) == '<tool_call>{"name": "subtract", "arguments":'
    from evolvekit.env.base import ToolSchema

    assert call_prefix(tools, done, 3, n_breadth=3) == '<tool_call>{"name": "'  # depth phase
    # parallel runs start n_breadth apart in the untried tools, so together they cover different tools
    many = [ToolSchema(name=f"t{i}") for i in range(8)]
    firsts = [call_prefix(many, [], 0, n_breadth=3, run=r) for r in range(3)]
    assert firsts == ['<tool_call>{"name": "' + n + '", "arguments":' for n in ("t0", "t3", "t6")]
    assert "Try `t3`" in explorer_messages(many, [], [], 0, 3, 4, run=1)[-1].content  # the hint names the same tool


def test_targeted_synthesis_parsing_windows_and_shots():
    from evolvekit.questioning.synthesize import parse_request, shots_from_examples, windows
    from evolvekit.types import ChatMessage

    assert parse_request('Task: "What is 2 plus 3?"\nSolution: 0') == "What is 2 plus 3?"
    assert parse_request("**Add 5 to 8.**") == "Add 5 to 8."
    assert parse_request("   \n") is None and parse_request("ok") is None
    assert parse_request('<tool_call>{"name": "add"}') is None
    assert parse_request("Result of [1] is 1.0.") is None  # points into the listing
    assert parse_request("The user asked for call [0]. Write the user's next request, which call [1] solves") is None
    # echoes of the instruction's words, seen in an fs_chain evidence run, are no request; real requests pass
    assert parse_request("Only 1 sentence, self-contained, with every value it needs.") is None
    assert parse_request("Write the user's request that lists the files.") is None
    assert parse_request("Now multiply the result by 4.") == "Now multiply the result by 4."
    assert parse_request("Create a folder named fiction and move notes.txt into it.") is not None
    assert windows(5, 1, 3) == [[0], [2], [4]]
    assert windows(5, 2, 2) == [[0, 1], [3, 4]]
    assert windows(2, 3, 3) == [[0, 1]]  # fewer calls than the difficulty asks for
    ex = [
        ChatMessage(role="user", content="What is 1 plus 2?"),
        ChatMessage(role="assistant", content='<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'),
        ChatMessage(role="user", content='Tool results:\n[add] {"result": 3}'),
        ChatMessage(role="assistant", content="3."),
    ]
    shots = shots_from_examples(ex)
    assert len(shots) == 1 and shots[0][1] == "What is 1 plus 2?" and '"add"' in shots[0][0] and "3" in shots[0][0]


def test_a_family_is_explored_in_a_state_its_own_generator_draws():
    """fs_chain's explorer starts in a file tree the family's generator draws (not a person-written task's), so
    reading, entering and moving its files can succeed (in an empty file system only ls and creations could: an
    fs_chain evidence run synthesized mostly ls(a=True) tasks); a family without state (arith_turns) keeps an empty
    one."""
    from evolvekit.env.base import Action
    from evolvekit.env.bfcl.families import get_family
    from evolvekit.env.registry import env_tasks
    from evolvekit.questioning import pipeline
    from evolvekit.questioning.pipeline import sandbox_for

    cfg = load_config(None, ["env.family=fs_chain"])
    sandbox = sandbox_for(cfg.env)
    assert sandbox["initial_config"] == get_family("fs_chain").sandbox_state() and sandbox["tools"][0] == "ls"
    # drawn from the family's generator at its own seed, never read off a person-written task (issue 51)
    train = env_tasks(cfg.env, cfg.env.train_split)
    assert sandbox["initial_config"] and sandbox["initial_config"] != train[0].initial_config
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("evolvekit.env.registry.env_tasks", lambda *a, **k: pytest.fail("read a person-written task"))
        assert pipeline.sandbox_for(cfg.env) == sandbox
    files = sandbox["initial_config"]["GorillaFileSystem"]["root"]["workspace"]["contents"]
    name = next(n for n, f in files.items() if f["type"] == "file")
    env = make_env(cfg.env)
    try:
        env.reset(None, sandbox)
        res = env.step(Action(tool_calls=[ToolCall(name="cat", arguments={"file_name": name})]))
        assert res.call_results[0].ok and files[name]["content"] in res.call_results[0].output
    finally:
        env.close()
    assert sandbox_for(load_config(None, [*PERSON, "env.family=arith_turns"]).env)["initial_config"] == {}


def test_plain_bfcl_explores_in_states_the_environment_makes_never_a_person_written_tasks():
    """Issue 51: plain BFCL (no family) took its exploration sandbox from a person-written training task's initial
    state. It now starts in the backends' own default states, with the file tree the file-system families' generator
    draws; no person-written task is read."""
    from evolvekit.env.base import Action
    from evolvekit.env.bfcl.families import get_family
    from evolvekit.questioning import pipeline

    tree = get_family("fs_chain").sandbox_state()["GorillaFileSystem"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("evolvekit.env.registry.env_tasks", lambda *a, **k: pytest.fail("read a person-written task"))
        both = pipeline.sandbox_for(load_config(None, ["env.backends=[GorillaFileSystem, MessageAPI]"]).env)
        math = pipeline.sandbox_for(load_config(None, ["env.backends=[MathAPI]"]).env)
        every = pipeline.sandbox_for(load_config(None, []).env)
    assert both == {"classes": ["GorillaFileSystem", "MessageAPI"], "initial_config": {"GorillaFileSystem": tree}}
    assert math == {"classes": ["MathAPI"], "initial_config": {}} and every["initial_config"] == both["initial_config"]
    env = make_env(load_config(None, ["env.backends=[GorillaFileSystem, MessageAPI]"]).env)
    try:
        env.reset(None, both)
        name = next(n for n, f in tree["root"]["workspace"]["contents"].items() if f["type"] == "file")
        res = env.step(Action(tool_calls=[ToolCall(name="cat", arguments={"file_name": name})]))
        assert res.call_results[0].ok
        res = env.step(Action(tool_calls=[ToolCall(name="list_users", arguments={})]))
        assert res.call_results[0].ok and "Alice" in res.call_results[0].output  # MessageAPI's own default users
    finally:
        env.close()


def test_the_explorer_is_shown_what_its_sandbox_holds():
    """The sandbox's first observation names the files and folders of its initial state and the explorer's first
    message shows it, so its cd/cat/mv calls can name things that exist (shown nothing, the 135M explorer guessed:
    0 of 9 cd calls and 3 of 15 cat calls succeeded in an fs_chain probe)."""
    from evolvekit.env.bfcl.env import describe_state
    from evolvekit.questioning.pipeline import sandbox_for

    sandbox = sandbox_for(load_config(None, ["env.family=fs_chain"]).env)
    files = sandbox["initial_config"]["GorillaFileSystem"]["root"]["workspace"]["contents"]
    text = describe_state(sandbox["initial_config"])
    assert text.startswith("Current directory: workspace. It holds: ")
    for name, node in files.items():
        assert (f"{name}/ (nothing)" if node["type"] == "directory" else name) in text
    assert describe_state({}) == "" and describe_state({"MathAPI": {}}) == ""
    nested = {"GorillaFileSystem": {"root": {"w": {"type": "directory", "contents": {
        "a": {"type": "directory", "contents": {"b.txt": {"type": "file", "content": "x"},
                                                "c": {"type": "directory", "contents": {}}}}}}}}}  # fmt: skip
    assert describe_state(nested) == "Current directory: w. It holds: a/ (b.txt, c/)."  # one level into folders
    assert describe_state({"TwitterAPI": {"username": "x" * 400}}).endswith("...")  # another backend: shortened

    seen = []

    def answer(conv):
        seen.append(conv)
        return _explorer_answer(conv)

    explorer = Explorer(Engine(_Scripted(answer)), SamplingParams(temperature=1.0), n_breadth=2, n_depth=10)
    explorer.explore(lambda: make_env(EnvConfig(name="bfcl")), sandbox, runs=1, max_steps=2)
    firsts = [next(m.content for m in c if m.content.startswith("You are exploring")) for c in seen]
    assert len(firsts) == 2 and all(text in f for f in firsts)  # every step's context starts with it
    seen.clear()  # questioning.explore_state=false: not shown
    Explorer(Engine(_Scripted(answer)), SamplingParams(temperature=1.0), 2, 10, show_start=False).explore(
        lambda: make_env(EnvConfig(name="bfcl")), sandbox, runs=1, max_steps=1
    )
    assert seen and not any("Current directory" in m.content for c in seen for m in c)
    from evolvekit.questioning.pipeline import explorer_and_synthesizer

    for on in (True, False):  # the config switch reaches the explorer a run builds
        cfg = load_config(None, ["env.family=fs_chain", f"questioning.explore_state={str(on).lower()}"])
        explorer, _ = explorer_and_synthesizer(
            SynthesisSettings.of(cfg), _Scripted(answer), SamplingParams(), _Scripted(answer), SamplingParams(),
            partial(make_env, cfg.env), sandbox_for(cfg.env),
        )  # fmt: skip
        assert explorer.show_start is on


def test_shots_skip_follow_up_turns_of_multi_turn_examples():
    """arith_turns' worked examples have a second turn ("Multiply that by 3.") that does not state the first
    result; as a synthesis shot it taught the synthesizer to write requests that leave values out."""
    from evolvekit.questioning.curate import grounding
    from evolvekit.questioning.pipeline import sandbox_for
    from evolvekit.questioning.synthesize import shots_from_examples

    cfg = load_config(None, [*PERSON, "env.family=arith_turns"])
    env = make_env(cfg.env)
    examples = env.reset(None, sandbox_for(cfg.env)).examples
    env.close()
    user_turns = [m.content for m in examples if m.role == "user" and not m.content.startswith("Tool results")]
    assert any("that" in u.lower() or "the result" in u.lower() for u in user_turns)  # follow-ups are there
    shots = shots_from_examples(examples)
    assert [r for _, r in shots] == ["Add 5 and 7.", "What is 20 plus 4?", "Compute the sum of 9 and 6."]
    assert all(
        grounding(Task(env_name="bfcl", query=r, reference_solution=[[ToolCall(name="add", arguments=a)]])) == 1.0
        for r, a in zip([r for _, r in shots], [{"a": 5, "b": 7}, {"a": 20, "b": 4}, {"a": 9, "b": 6}])
    )


def test_targeted_synthesizer_uses_the_chosen_window_as_reference():
    from evolvekit.config import DifficultyConfig
    from evolvekit.questioning.explore import ExplorationStep, ExplorationTrace
    from evolvekit.questioning.synthesize import TaskSynthesizer
    from evolvekit.types import ToolCall

    calls = [ToolCall(name="add", arguments={"a": i, "b": 1}) for i in range(3)]
    trace = ExplorationTrace("e1", {}, [ExplorationStep(i, "", [c], f"{i + 1}", True) for i, c in enumerate(calls)])
    llm = _Scripted(lambda conv: "What is 0 plus 1?" if '"a": 0' in conv[-1].content else "sure")
    rep = TaskSynthesizer(
        Engine(llm), SamplingParams(), DifficultyConfig(operations=1), tasks_per_trace=2, targeted=True
    ).synthesize([trace], "bfcl")
    assert [t.reference_solution[0][0].arguments["a"] for t in rep.tasks] == [0]  # windows [0] and [2] asked
    assert rep.tasks[0].query == "What is 0 plus 1?" and rep.unparseable == 1  # "sure" is not a request


@pytest.mark.slow
def test_scaffold_constrains_the_depth_step_tool_name_to_real_tools(tmp_path):
    """Where the explorer chooses the tool (depth steps), the scaffold restricts the name to the sandbox's tools,
    and the arguments to what the chosen tool's schema accepts."""
    import json

    from evolvekit.env.action_text import CLOSE, parse_action
    from evolvekit.llm.local import LocalLLM
    from evolvekit.llm.tiny import make_tiny_model
    from evolvekit.questioning.explore import OPEN_NAME, Explorer
    from evolvekit.types import ChatMessage

    llm = LocalLLM(str(make_tiny_model(tmp_path / "m")), device="cpu")
    num = {"type": "integer"}
    tools = [
        type("T", (), {"name": n, "parameters": p})()
        for n, p in (
            ("add", {"type": "dict", "properties": {"a": num, "b": num}, "required": ["a", "b"]}),
            ("multiply", {"properties": {"a": num}, "required": ["a"]}),
            ("ls", {}),
        )
    ]
    explorer = Explorer(Engine(llm), SamplingParams(temperature=1.0, max_new_tokens=48, seed=1), scaffold=True)
    batch = explorer.engine.constrained(explorer.params, keep_rows=True)  # what explore() opens
    convs = [[ChatMessage(role="user", content=f"explore {i}")] for i in range(4)]
    outs = explorer._generate(convs, [OPEN_NAME] * 4, 5, list(range(4)), batch, [tools] * 4)
    required = {"add": {"a", "b"}, "multiply": {"a"}, "ls": set()}
    for text in outs:  # a random tiny model, yet each reply is a call of a real tool with arguments it accepts
        call = json.loads(text[len("<tool_call>") :])
        assert call["name"] in required and required[call["name"]] <= set(call["arguments"]), text
        assert all(isinstance(v, int) for v in call["arguments"].values()), text
        assert parse_action(text + CLOSE).tool_calls[0].name == call["name"]


def test_schema_problem_by_hand():
    """A tool's parameters must be a JSON schema object (BFCL's "dict" too) or empty; a flat description is named,
    cut at 120 characters, with the fix."""
    from evolvekit.questioning.explore import schema_problem

    for fine in ({}, {"properties": {}}, {"type": "object"}, {"type": "dict"}, {"type": "object", "properties": {}}):
        assert schema_problem(ToolSchema(name="f", parameters=fine)) is None, fine
    flat = {"n": {"type": "integer", "description": "x" * 200}}
    shown = '{"n": {"type": "integer", "description": "' + "x" * 78
    assert len(shown) == 120
    assert schema_problem(ToolSchema(name="f", parameters=flat)) == (
        f"tool 'f': its parameters {shown} are no JSON schema object; write them as "
        '{"type": "object", "properties": {...}} (docs/environments.md, "Bring your own environment")'
    )
    assert schema_problem(ToolSchema(name="g", parameters={"type": "array"})) is not None


class _FlatEnv(_Env):
    def reset(self, task, sandbox):
        flat = [ToolSchema(name=n, parameters={"a": {"type": "integer"}}) for n in ("first", "second")]
        return ResetResult(observation="", tools=[TOOLS[0], *flat])


def test_a_tool_without_a_json_schema_object_stops_exploration_before_any_step():
    """The first run's tools are checked before any step: the first unusable one is one EnvError line, every
    started environment is closed, and the explorer is never asked."""
    from evolvekit.questioning.explore import schema_problem

    envs = [_FlatEnv(), _FlatEnv()]
    made, llm = iter(envs), _LLM([])
    first = schema_problem(ToolSchema(name="first", parameters={"a": {"type": "integer"}}))
    with pytest.raises(EnvError) as err:
        Explorer(Engine(llm), SamplingParams()).explore(lambda: next(made), {}, runs=2, max_steps=2)
    assert str(err.value) == f"exploration: {first}"
    assert all(e.closed for e in envs) and llm.calls == []
    envs = [_Env(fail_reset=True), _FlatEnv()]  # the first run did not start: the next one's tools are checked
    made = iter(envs)
    with pytest.raises(EnvError, match="^exploration: tool 'first'"):
        Explorer(Engine(llm), SamplingParams()).explore(lambda: next(made), {}, runs=2, max_steps=2)
    assert envs[1].closed and llm.calls == []
    assert Explorer(Engine(llm), SamplingParams()).explore(lambda: _FlatEnv(), {}, runs=0, max_steps=2) == []


class _NoResults(_Env):
    def step(self, action):
        self.steps += 1
        return StepResult(observation="did something")  # a plugin's slip: no call_results


def test_a_step_without_call_results_warns_once_per_environment_class(monkeypatch, caplog):
    """A step that ran calls but returned no call_results: every call counts as failed, and the log says why once
    per environment class, naming the class and the calls."""
    import logging

    from evolvekit.questioning import explore as explore_mod

    monkeypatch.setattr(explore_mod, "_WARNED_NO_RESULTS", set())
    two = _call("ls") + _call("cat")
    llm = _LLM([two, two, _call("ls")])
    with caplog.at_level(logging.WARNING, logger=explore_mod.log.name):
        traces = Explorer(Engine(llm), SamplingParams()).explore(lambda: _NoResults(), {}, runs=1, max_steps=3)
        explore_mod.warn_no_call_results(_Env(), 1)  # another class: its own warning
    assert [s.ok for s in traces[0].steps] == [False, False, False]
    warned = [r.getMessage() for r in caplog.records if "no call_results" in r.getMessage()]
    assert len(warned) == 2
    assert warned[0] == (
        "_NoResults.step: 2 tool call(s) and no call_results: every call counts as failed, so exploration finds "
        "nothing and no task is kept; return one CallResult per call (evolvekit.env.base.execute_calls does it; "
        'docs/environments.md, "Bring your own environment")'
    )
    assert warned[1].startswith("_Env.step: 1 tool call(s)")
