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
