"""The four context templates on hand-built timelines: snapshot merge, loss masks, and exact span stripping."""

import pytest

from evolvekit.agent.context import SnapshotRecorder
from evolvekit.agent.templates import (
    EXP_OPEN,
    BasicContext,
    ReasoningContext,
    SelfManagingContext,
    SlidingWindowContext,
    check_think_format,
)
from evolvekit.engine.base import Engine
from evolvekit.llm.local import LocalLLM
from evolvekit.llm.tiny import make_tiny_model
from evolvekit.train.samples import strip_spans
from evolvekit.types import ChatMessage, SpanKind


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    return LocalLLM(str(make_tiny_model(tmp_path_factory.mktemp("tiny") / "m")), device="cpu")


def _episode(llm, ctx, replies):
    """Play a timeline: before each reply, prepare + tokenize + record, as the rollout does."""
    rec = SnapshotRecorder()
    completions = []
    for i, reply in enumerate(replies):
        ctx.prepare(llm)
        ids, spans = ctx.tokenize(llm)
        comp = llm.encode(reply) + [llm.tokenizer.eos_token_id]  # what the model sampled, ending with <|im_end|>
        rec.record(i, ids, comp, [-0.5] * len(comp), spans=spans)
        completions.append(comp)
        ctx.add_assistant(reply)
        ctx.add_observation(f"result {i} " + "x " * 30)
    return rec.merge(), completions


def _check_masks(seqs, completions):
    # every completion appears exactly once, under loss mask 1, at its step span; nothing else is masked in
    total = 0
    for seq in seqs:
        for step, (a, b) in seq.step_spans.items():
            assert seq.token_ids[a:b] == completions[step]
            assert seq.loss_mask[a:b] == [1] * (b - a)
            assert seq.logprobs[a:b] == [-0.5] * (b - a)
        total += sum(seq.loss_mask)
    assert total == sum(len(c) for c in completions)
    assert sorted(k for s in seqs for k in s.step_spans) == list(range(len(completions)))


def test_basic_template_merges_into_one_sequence(llm):
    ctx = BasicContext("You are an agent.", "List the files.")
    seqs, comps = _episode(llm, ctx, ['<tool_call>{"name": "ls", "arguments": {}}</tool_call>', "Done."])
    assert len(seqs) == 1
    _check_masks(seqs, comps)


def test_reasoning_template_format_check(llm):
    ctx = ReasoningContext("You are an agent.", "Add 2 and 3.")
    assert "<think>" in ctx.messages[0].content
    assert check_think_format("<think>add them</think> <tool_call>{}</tool_call>") == (
        True,
        "<tool_call>{}</tool_call>",
    )
    assert check_think_format("no thinking") == (False, "no thinking")
    assert check_think_format("<think>a</think><think>b</think>x") == (False, "x")
    action, info = ctx.parse_text("<think>easy</think>The answer is 5.")
    assert action == "The answer is 5." and (info.format_ok, info.think_words) == (True, 1)
    seqs, comps = _episode(llm, ctx, ["<think>call add</think>Done."])
    _check_masks(seqs, comps)


def test_sliding_window_summarises_and_starts_a_new_sequence(llm):
    ctx = BasicContext("s", "u")
    limit = len(ctx.tokenize(llm)[0]) + 60
    ctx = SlidingWindowContext(
        "You are an agent.", "Do the task.", token_limit=limit, summarise=lambda msgs: f"{len(msgs)} old messages"
    )
    seqs, comps = _episode(llm, ctx, ["first reply", "second reply", "third reply"])
    assert any(m.content.startswith("Memory of the earlier interaction") for m in ctx.messages)
    assert len(seqs) >= 2  # the rewritten history no longer extends the stored sequence
    _check_masks(seqs, comps)
    # the protected prefix (system + first request) survives every summary
    assert ctx.messages[0].content == "You are an agent." and ctx.messages[1].content == "Do the task."


class _Manager:
    """Wraps the tiny model; its management answers are scripted (a test double for the policy's decision)."""

    def __init__(self, llm, answer):
        self.llm, self.answer, self.asked = llm, answer, 0

    def __getattr__(self, name):
        return getattr(self.llm, name)

    def chat(self, conversations, params):
        from evolvekit.llm.base import Completion

        self.asked += 1
        return [[Completion(text=self.answer)] for _ in conversations]


def test_self_managing_applies_the_policys_decisions(llm):
    summarised = []

    def summarise(messages):
        summarised.append([m.content for m in messages])
        return "the assistant wrote many a's"

    ctx = SelfManagingContext("You are an agent.", "Do the task.", token_limit=10_000, summarise=summarise)
    ctx.add_assistant("a" * 300)
    ctx.add_observation("b" * 300)
    ctx.add_assistant("keep me")
    ctx.add_observation("latest")
    ctx.token_limit = 50
    mgr = _Manager(llm, "[0]: compress\n1: remove\n3: remove")
    ctx.prepare(mgr)
    body = [m.content for m in ctx.messages[2:]]
    assert mgr.asked == 1
    # "compress" writes the summariser's summary of the message (§6.2.1), not its first characters
    assert body[0] == "[compressed] the assistant wrote many a's" and summarised == [["a" * 300]]
    assert body[1:] == ["keep me", "Tool results:\nlatest"]  # message 3 is the newest: always kept
    assert ctx.events and ctx.events[0].kind == "manage"
    seqs, comps = _episode(_Manager(llm, "0: remove"), ctx, ["next", "again"])
    _check_masks(seqs, comps)


def test_self_managing_decisions_are_greedy_unless_sampled_from_the_policy(llm):
    """rollout.manage_sampled (§6.2.1 (iv)): the decision call gets the policy's temperature and top-p; by default
    temperature 0."""
    from evolvekit.agent.templates import TemplateSettings, make_context
    from evolvekit.llm.base import SamplingParams

    asked = []

    class _Recording(_Manager):
        def chat(self, conversations, params):
            asked.append(params)
            return super().chat(conversations, params)

    sampled = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=128)
    for manage in (None, sampled):
        ctx = make_context(TemplateSettings(template="self_managing", token_limit=10, manage_params=manage), "S", "U")
        ctx.add_assistant("a" * 200)
        ctx.add_observation("b" * 200)
        ctx.prepare(_Recording(llm, "0: remove"))
    assert [(p.temperature, p.top_p) for p in asked] == [(0.0, 1.0), (0.7, 0.9)]


def test_experience_span_is_exact_and_stripped(llm):
    ctx = BasicContext("You are an agent.", "List the files.")
    ctx.insert_experience("When listing, call ls first.")
    ids, spans = ctx.tokenize(llm)
    assert len(spans) == 1 and spans[0].kind == SpanKind.EXPERIENCE
    inside = llm.decode(ids[spans[0].start : spans[0].end])
    assert EXP_OPEN in inside and "call ls first." in inside and "You are an agent" not in inside
    seqs, comps = _episode(llm, ctx, ["ok", "done"])
    assert len(seqs) == 1
    exp_spans = [s for s in seqs[0].spans if s.kind == SpanKind.EXPERIENCE]
    assert len(exp_spans) == 1  # recorded once, not once per step
    stripped = strip_spans(seqs[0])
    text = llm.decode(stripped.token_ids)
    assert EXP_OPEN not in text and "call ls first" not in text and "You are an agent." in text
    assert len(stripped.token_ids) == len(seqs[0].token_ids) - (exp_spans[0].end - exp_spans[0].start)
    _check_masks([stripped], comps)  # completions untouched, step spans shifted


def test_set_system_keeps_the_experience_block(llm):
    ctx = ReasoningContext("tools: a", "go")
    ctx.insert_experience("tip")
    ctx.set_system("tools: a, b")
    assert ctx.messages[0].content.startswith("tools: a, b") and "<think>" in ctx.messages[0].content
    seg = ctx.segments[0]
    assert ctx.messages[0].content[seg.start : seg.end].strip().startswith(EXP_OPEN)


def test_experience_guided_rollout_records_and_strips_the_span(llm, monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "plugins"))
    from evolvekit.agent.rollout import RolloutJob, run_rollouts
    from evolvekit.config import EnvConfig, RolloutConfig
    from evolvekit.env.registry import env_tasks, make_env
    from evolvekit.llm.base import SamplingParams
    from evolvekit.train.samples import build_samples

    cfg = EnvConfig(name="coin", plugins=["coin_env"])
    task = env_tasks(cfg, "train")[0]
    jobs = [
        RolloutJob(task=task, group_id="g", experience="Answer briefly.", experience_ids=("exp-1",)),
        RolloutJob(task=task, group_id="g"),
    ]
    trajs = run_rollouts(
        jobs,
        lambda: make_env(cfg),
        Engine(llm),
        RolloutConfig(max_steps=1, concurrency=2),
        SamplingParams(max_new_tokens=6, seed=0),
        show_progress=False,
    )
    guided, vanilla = trajs
    assert guided.flags.experience_guided and guided.experience_used == ["exp-1"]
    assert not vanilla.flags.experience_guided and not vanilla.steps[0].spans
    assert [s.kind for s in guided.steps[0].spans] == [SpanKind.EXPERIENCE]
    kept, _ = build_samples([guided], [{0: 1.0}], strip_experience=True)
    raw, _ = build_samples([guided], [{0: 1.0}], strip_experience=False)
    span = guided.steps[0].spans[0]
    assert len(kept[0].token_ids) == len(raw[0].token_ids) - (span.end - span.start)
    assert sum(raw[0].experience_mask) == span.end - span.start and sum(kept[0].experience_mask) == 0
    assert kept[0].experience_guided and "Answer briefly" not in llm.decode(kept[0].token_ids)


def test_stripped_prompt_equals_the_prompt_without_experience(llm):
    from evolvekit.agent.context import MergedSequence

    for template_cls in (BasicContext, ReasoningContext):
        with_exp = template_cls("You are an agent. Tools: ls, cd.", "List the files.")
        with_exp.insert_experience("When to use: listing.\nContent: call ls before anything else.")
        ids, spans = with_exp.tokenize(llm)
        seq = MergedSequence(token_ids=list(ids), loss_mask=[0] * len(ids), logprobs=[0.0] * len(ids), spans=spans)
        without = template_cls("You are an agent. Tools: ls, cd.", "List the files.").tokenize(llm)[0]
        assert strip_spans(seq).token_ids == without


def test_run_wires_the_summarizer_role_into_the_memory_templates(monkeypatch):
    from evolvekit.agent import parts
    from evolvekit.config import load_config
    from evolvekit.types import ChatMessage

    class _Summarizer:
        name = "summarizer"

        def __init__(self):
            self.prompts = []

        def chat(self, conversations, params):
            from evolvekit.llm.base import Completion

            self.prompts += conversations
            return [[Completion(text="cd docs, then ls found a.txt")] for _ in conversations]

    role = _Summarizer()
    monkeypatch.setattr("evolvekit.llm.factory.role_llm", lambda models, name: role if name == "summarizer" else None)
    for template in ("sliding_window", "self_managing"):
        settings = parts.rollout_template(load_config(None, [f"rollout.template={template}"]))
        assert (
            settings.summarise([ChatMessage(role="user", content="Tool results:\nls -> a.txt")])
            == "cd docs, then ls found a.txt"
        )
    assert parts.rollout_template(load_config(None, [])).summarise is None
    assert len(role.prompts) == 2


def test_reasoning_template_carries_its_reasoning_reward():
    from evolvekit.config import load_config
    from evolvekit.train.rewards import reasoning_reward, shape_rewards
    from evolvekit.types import Step, Trajectory

    ctx = ReasoningContext("sys", "task")
    _, info = ctx.parse_text("<think>add the two numbers then answer</think><tool_call>{}</tool_call>")
    assert (info.format_ok, info.think_words) == (True, 6)
    steps = [
        Step(index=0, action_text="x", format_ok=info.format_ok, think_words=info.think_words),
        Step(index=1, action_text="y", format_ok=True, think_words=1),
        Step(index=2, action_text="z", format_ok=False, think_words=0),
    ]
    traj = Trajectory(task_id="t", steps=steps, outcome_reward=1.0)
    assert reasoning_reward(traj) == (1.0 + 0.5 + 0.0) / 3
    assert load_config(None, ["rollout.template=reasoning"]).reward.w_reasoning == 0.1
    assert load_config(None, []).reward.w_reasoning == 0.0
    shape_rewards([traj], 1.0, 0.0, w_reasoning=0.1)
    assert abs(traj.outcome_reward - (1.0 + 0.1 * 0.5)) < 1e-9 and traj.rewards.reasoning == 0.5


def test_the_policys_context_management_decisions_are_trained_steps(llm):
    """Issue 53 (4): the self-managing template's keep/remove/compress decision was made outside the snapshot
    recorder, so the policy was never trained on it (§6.2.1). Each decision is now recorded with its tokens and
    becomes a training sample carrying the advantage of the step it preceded."""
    from evolvekit.agent.rollout import RolloutJob, run_rollouts
    from evolvekit.agent.templates import TemplateSettings
    from evolvekit.config import RolloutConfig
    from evolvekit.env.base import EnvInfo, EvalResult, ResetResult, StepResult
    from evolvekit.llm.base import SamplingParams
    from evolvekit.train.samples import build_samples
    from evolvekit.types import Task

    class Chatty:  # never done, long observations: the context outgrows its limit after the first step
        name = "chatty"

        def reset(self, task=None, sandbox_config=None):
            return ResetResult(observation="Start.", tools=[])

        def step(self, action):
            return StepResult(observation="result " + "x " * 40)

        def evaluate(self, trajectory=None):
            return EvalResult(score=1.0, passed=True)

        def info(self):
            return EnvInfo(env_name="chatty", instance_id="c")

        def profile(self):
            return []

        def close(self):
            pass

    task = Task(task_id="t", env_name="chatty", query="q")
    (traj,) = run_rollouts(
        [RolloutJob(task=task, group_id="g")],
        Chatty,
        Engine(llm),
        RolloutConfig(max_steps=3, concurrency=1),
        SamplingParams(max_new_tokens=6, seed=0),
        show_progress=False,
        template=TemplateSettings(template="self_managing", token_limit=64),
    )
    assert len(traj.steps) == 3 and [d.before_step for d in traj.context_decisions] == [1, 2]
    adv = {0: 0.5, 1: -0.25, 2: 1.0}
    samples, _ = build_samples([traj], [adv])
    decisions = samples[-2:]
    for d, s in zip(traj.context_decisions, decisions):
        assert s.token_ids == d.prompt_token_ids + d.completion_token_ids
        assert sum(s.loss_mask) == len(d.completion_token_ids) > 0
        assert {a for a, m in zip(s.token_advantages, s.loss_mask) if m} == {adv[d.before_step]}
    plain, _ = build_samples([traj.model_copy(update={"context_decisions": []})], [adv])
    assert len(samples) == len(plain) + 2


class _Scripted:
    """A chat-only helper whose replies are scripted; records every conversation it is asked."""

    def __init__(self, reply):
        self.reply, self.asked = reply, []

    def chat(self, conversations, params):
        from evolvekit.llm.base import Completion

        self.asked.append((conversations, params))
        return [[Completion(text=self.reply)] for _ in conversations]


def test_the_memory_summariser_asks_for_every_message_and_falls_back_to_truncation():
    """§6.2.1's summariser role: one call with the whole history as ``ROLE: content`` lines under the compression
    instruction; an empty reply gives the deterministic truncation summary instead."""
    from evolvekit.agent.templates import llm_summariser, truncation_summary
    from evolvekit.llm.base import SamplingParams

    history = [ChatMessage(role="assistant", content="ls /data"), ChatMessage(role="user", content="a.txt b.txt")]
    params = SamplingParams(temperature=0.3, max_new_tokens=40)
    helper = _Scripted("  listed a.txt and b.txt  ")
    assert llm_summariser(helper, params)(history) == "listed a.txt and b.txt"
    [(conversations, used)] = helper.asked
    assert used is params
    [[system, user]] = conversations
    assert (system.role, system.content) == ("system", "You compress an agent's interaction history.")
    assert user.role == "user" and user.content == (
        "Summarise this interaction in a few short lines. Keep every tool result, value and file name that may "
        "matter later.\n\nASSISTANT: ls /data\nUSER: a.txt b.txt"
    )
    assert llm_summariser(_Scripted("   "), params)(history) == truncation_summary(history)
    # the truncation summary: one line per message, its role and first characters, an ellipsis where cut
    long = ChatMessage(role="user", content=" " + "x" * 170)
    assert truncation_summary([history[0], long]) == "- assistant: ls /data\n- user: " + "x" * 159 + "…"
    assert truncation_summary([history[1]], chars=5) == "- user: a.txt…"
    assert truncation_summary([ChatMessage(role="user", content="abcde")], chars=5) == "- user: abcde"  # not cut


def test_self_managing_lists_the_interaction_and_survives_a_failing_summariser(caplog):
    """The management prompt numbers every message after the protected ones with its first 200 characters; a
    summariser that raises compresses by truncation and says so; the defaults are the paper's limit and a greedy
    128-token decision."""
    import logging

    from evolvekit.agent.templates import COMPRESS_CHARS, truncation_summary

    def broken(messages):
        raise RuntimeError("no summariser")

    ctx = SelfManagingContext("S", "U", summarise=broken)
    assert ctx.token_limit == 4096 and (ctx.params.temperature, ctx.params.max_new_tokens) == (0.0, 128)
    assert ctx.summarise is broken and SelfManagingContext("S", "U").summarise is truncation_summary
    ctx.add_assistant("y" * 300)
    ctx.add_user("second")
    ctx.add_observation("latest")
    system, listing = ctx.management_prompt()
    assert system.role == "system" and system.content == (
        "Your context is too long. Decide for each numbered message: keep, remove, or compress. Answer one line "
        "per message like `3: remove`."
    )
    assert listing.role == "user" and listing.content == (
        f"[0] assistant: {'y' * COMPRESS_CHARS}\n[1] user: second\n[2] user: Tool results:\nlatest"
    )
    with caplog.at_level(logging.WARNING, logger="evolvekit.agent.templates"):
        decisions = ctx.apply_decisions("0: compress\n1: keep\n2: remove")
    assert decisions == {0: "compress", 1: "keep", 2: "remove"}
    body = [m.content for m in ctx.messages[ctx.protected :]]
    expected = "[compressed] " + truncation_summary([ChatMessage(role="assistant", content="y" * 300)])
    assert body == [expected, "second", "Tool results:\nlatest"]  # the newest is kept whatever it was told
    assert [r.getMessage() for r in caplog.records] == ["summariser failed (no summariser); using truncation"]
    untouched = ctx.apply_decisions("")  # no answer: every message is kept as it is
    assert untouched == {} and [m.content for m in ctx.messages[ctx.protected :]] == body


@pytest.mark.parametrize("cls", [BasicContext, ReasoningContext, SlidingWindowContext, SelfManagingContext])
def test_every_template_shows_the_worked_examples_and_protects_them(cls):
    """The run's worked examples sit between the system prompt and the first request in every template, and are
    never summarised, compressed or removed (they count among the protected messages)."""
    shown = [ChatMessage(role="user", content="Add 1 and 2."), ChatMessage(role="assistant", content="<call>")]
    ctx = cls("S", "U", examples=shown)
    assert [m.content for m in ctx.messages[1:4]] == ["Add 1 and 2.", "<call>", "U"]
    assert ctx.protected == 4


class _Sized:
    """A policy double for the self-managing template: its chat template is ``size`` tokens long, its management
    answer scripted (or the call fails), its completion carries the given token ids."""

    def __init__(self, size, answer="", fail=False, prompt_ids=(), ids=()):
        self.size, self.answer, self.fail, self.asked = size, answer, fail, 0
        self.prompt_ids, self.ids = list(prompt_ids), list(ids)

    def apply_chat_template(self, messages):
        return [0] * self.size

    def chat(self, conversations, params):
        from evolvekit.llm.base import Completion

        self.asked += 1
        if self.fail:
            raise RuntimeError("server gone")
        return [[Completion(text=self.answer, token_ids=self.ids, prompt_token_ids=self.prompt_ids)]]


def _managed(limit=10):
    ctx = SelfManagingContext("S", "U", token_limit=limit)
    ctx.add_assistant("first")
    ctx.add_observation("second")
    return ctx


def test_self_managing_decides_only_past_its_limit_and_keeps_everything_when_the_call_fails(caplog):
    """§6.2.1 (iv): the policy is asked only when the context is longer than the limit (not at it); a failed call
    keeps every message, says so once, and logs a "manage" event of "none"; the decision is kept as a trainable step
    only when the engine gave both its prompt and its completion tokens; the event lists the decisions in order."""
    import logging

    at_limit = _Sized(10, "0: remove")
    ctx = _managed()
    ctx.prepare(at_limit)
    assert at_limit.asked == 0 and ctx.events == []
    failing, ctx = _Sized(11, fail=True), _managed()
    with caplog.at_level(logging.WARNING, logger="evolvekit.agent.templates"):
        ctx.prepare(failing)
    assert failing.asked == 1 and [m.content for m in ctx.messages[2:]] == ["first", "Tool results:\nsecond"]
    assert [r.getMessage() for r in caplog.records] == [
        "context management call failed (server gone); keeping everything"
    ]
    assert [(e.kind, e.detail) for e in ctx.events] == [("manage", "none")] and ctx.decisions == []
    for prompt_ids, ids, kept in (([1, 2], [3], True), ([], [3], False), ([1, 2], [], False)):
        ctx = _managed()
        ctx.prepare(_Sized(11, "1: keep\n0: remove", prompt_ids=prompt_ids, ids=ids))
        assert [(e.kind, e.detail) for e in ctx.events] == [("manage", "0:remove, 1:keep")]
        assert [m.content for m in ctx.messages[2:]] == ["Tool results:\nsecond"]
        assert len(ctx.decisions) == int(kept)


def test_make_context_builds_each_template_with_its_settings():
    from evolvekit.agent.templates import TemplateSettings, make_context
    from evolvekit.llm.base import SamplingParams

    shown = [ChatMessage(role="user", content="example")]

    def summarise(messages):
        return "s"

    manage = SamplingParams(temperature=0.5)
    settings = TemplateSettings(token_limit=77, summarise=summarise, manage_params=manage)
    kinds = {
        "basic": BasicContext,
        "reasoning": ReasoningContext,
        "sliding_window": SlidingWindowContext,
        "self_managing": SelfManagingContext,
    }
    for name, cls in kinds.items():
        settings.template = name
        ctx = make_context(settings, "S", "U", shown)
        assert type(ctx) is cls and ctx.messages[1].content == "example" and ctx.messages[2].content == "U"
        if name in ("sliding_window", "self_managing"):
            assert ctx.token_limit == 77 and ctx.summarise is summarise
    assert ctx.params is manage
    settings.template = "nope"
    with pytest.raises(ValueError, match="^unknown context template 'nope'$"):
        make_context(settings, "S", "U")


class _CharTokenizer:
    """One id per character, with offsets; like Llama's, it adds a BOS id unless told not to (HF's chat template
    tokenizes with ``add_special_tokens=False``). Renders a conversation as each content followed by ``|``, so the
    first message's content starts the text."""

    BOS = 1

    def __init__(self, render=lambda content: content) -> None:
        self.render = render

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=True):
        assert all(None not in m.values() for m in messages)  # exclude_none: a template may test `is defined`
        text = "".join(self.render(m["content"]) + "|" for m in messages)
        return self(text, add_special_tokens=False)["input_ids"] if tokenize else text

    def __call__(self, text, add_special_tokens=True, return_offsets_mapping=False):
        ids, offsets = [ord(c) for c in text], [(i, i + 1) for i in range(len(text))]
        if add_special_tokens:
            ids, offsets = [self.BOS, *ids], [(0, 0), *offsets]
        return {"input_ids": ids, "offset_mapping": offsets}


class _CharLLM:
    def __init__(self, tokenizer: _CharTokenizer) -> None:
        self.tokenizer = tokenizer

    def apply_chat_template(self, messages):
        return self.tokenizer.apply_chat_template([m.model_dump(exclude_none=True) for m in messages])


def test_segments_are_located_in_their_own_message_even_when_contents_repeat():
    # the same content twice: each message's content is found after the previous one's, the first at offset 0
    from evolvekit.agent.templates import Segment, tokenize_with_segments

    msgs = [ChatMessage(role="system", content="same text"), ChatMessage(role="user", content="same text")]
    llm = _CharLLM(_CharTokenizer())
    ids, spans = tokenize_with_segments(llm, msgs, [Segment(message=1, start=5, end=9), Segment(0, 0, 4)])
    assert ids == [ord(c) for c in "same text|same text|"]  # no BOS: the chat template's own ids
    assert [(s.start, s.end) for s in spans] == [(15, 19), (0, 4)]
    assert "".join(chr(i) for i in ids[15:19]) == "text"
    assert tokenize_with_segments(llm, msgs, []) == (ids, [])


def test_segments_refuse_a_tokenizer_or_template_they_cannot_follow():
    from evolvekit.agent.templates import Segment, tokenize_with_segments

    msgs = [ChatMessage(role="user", content="hello")]

    class Disagrees(_CharLLM):
        def apply_chat_template(self, messages):
            return [*super().apply_chat_template(messages), 0]

    with pytest.raises(ValueError, match=r"^the tokenizer does not reproduce the chat template's ids; cannot locate"):
        tokenize_with_segments(Disagrees(_CharTokenizer()), msgs, [Segment(0, 0, 1)])
    with pytest.raises(ValueError, match=r"^a message's content is not verbatim in the rendered chat template$"):
        tokenize_with_segments(_CharLLM(_CharTokenizer(render=str.upper)), msgs, [Segment(0, 0, 1)])


def test_self_managing_keeps_only_the_segments_of_the_messages_it_never_rewrites():
    # a decision may remove, compress or renumber any message past the protected ones, so their segments go; the
    # experience in the system prompt (protected) stays marked for stripping
    ctx = SelfManagingContext("You are an agent.", "Do the task.", token_limit=10)
    kept = ctx.insert_experience("a principle")
    ctx.add_assistant("first")
    ctx.add_observation("second")
    ctx.insert_experience("another", message=ctx.protected)
    ctx.apply_decisions("")
    assert ctx.segments == [kept]
