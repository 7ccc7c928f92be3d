"""The context templates' rules on doubles, with no model: the memory summariser, the self-managing decisions and
their segments, the sliding window's fold, the think format, ``set_system`` and ``tokenize_with_segments``. Torch-free,
so a mutation look (benchmarks/audits/mutation.py, the templates row) decides each of them without a model; the same
templates on the tiny model are tests/cpu/test_templates.py."""

import pytest

from evolvekit.agent.templates import (
    EXP_OPEN,
    BasicContext,
    ReasoningContext,
    SelfManagingContext,
    SlidingWindowContext,
    ThinkInfo,
    check_think_format,
)
from evolvekit.types import ChatMessage, SpanKind


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


def test_sliding_window_folds_the_older_half_into_one_memory_past_its_limit(caplog):
    """§6.2: past the limit (not at it) the older half of the interaction (at least one message) becomes one memory
    message written by the summariser, the newer half stays as it was, an earlier memory is folded into the next
    one, and a failing summariser falls back to the truncation summary with one warning; only the protected
    messages' segments stay. Torch-free (a sized double), so a mutation look decides it without a model."""
    import logging

    from evolvekit.agent.templates import MEMORY_PREFIX, truncation_summary

    seen = []

    def summarise(messages):
        seen.append([m.content for m in messages])
        return f"{len(messages)} old"

    def window(body, limit=10, summariser=summarise):
        ctx = SlidingWindowContext("S", "U", token_limit=limit, summarise=summariser)
        for i in range(body):
            ctx.add_assistant(f"a{i}")
        return ctx

    ctx = window(4)
    ctx.prepare(_Sized(10))  # at the limit: nothing changes
    assert len(ctx.messages) == 6 and ctx.events == [] and seen == []
    ctx = window(1)
    ctx.prepare(_Sized(11))  # one interaction message: nothing to fold
    assert len(ctx.messages) == 3 and ctx.events == []
    ctx = window(4)
    kept = ctx.insert_experience("a principle")
    ctx.insert_experience("gone", message=ctx.protected)
    ctx.prepare(_Sized(11))
    assert seen == [["a0\n<EXP>\ngone\n</EXP>", "a1"]]  # the older half, as it stood
    assert [m.content for m in ctx.messages[2:]] == [MEMORY_PREFIX + "2 old", "a2", "a3"]
    assert ctx.messages[2].role == "user" and ctx.messages[1].content == "U"
    assert ctx.segments == [kept]
    assert [(e.kind, e.detail) for e in ctx.events] == [("summarise", "2 messages -> memory (0 earlier memories)")]
    ctx.prepare(_Sized(11))  # three messages: the older "half" is the memory alone, folded into the next one
    assert seen[-1] == [MEMORY_PREFIX + "2 old"]
    assert [m.content for m in ctx.messages[2:]] == [MEMORY_PREFIX + "1 old", "a2", "a3"]
    assert ctx.events[-1].detail == "1 messages -> memory (1 earlier memories)"
    odd = window(3)
    odd.prepare(_Sized(11))
    assert [m.content for m in odd.messages[2:]] == [MEMORY_PREFIX + "1 old", "a1", "a2"]

    def broken(messages):
        raise RuntimeError("helper down")

    failing = window(2, summariser=broken)
    with caplog.at_level(logging.WARNING, logger="evolvekit.agent.templates"):
        failing.prepare(_Sized(11))
    assert [r.getMessage() for r in caplog.records] == ["summariser failed (helper down); using truncation"]
    assert failing.messages[2].content == MEMORY_PREFIX + truncation_summary(
        [ChatMessage(role="assistant", content="a0")]
    )
    assert (
        SlidingWindowContext("S", "U").token_limit == 4096
        and SlidingWindowContext("S", "U").summarise is truncation_summary
    )


def test_think_format_and_its_parse_on_every_shape_of_reply():
    """The reasoning template's check (§6.2): ok only for one leading ``<think>…</think>`` block (after leading
    space); a malformed reply acts on what follows the last closing tag; ``think_words`` counts the first block's
    words, 0 with no closing tag. Torch-free, so a mutation look decides it without a model."""
    assert check_think_format("  <think>a b</think> act now ") == (True, "act now")
    assert check_think_format("x <think>a</think> y") == (False, "y")  # not leading
    assert check_think_format("<think>a</think></think>b") == (False, "b")  # two closing tags
    assert check_think_format("x</think>y</think> do it ") == (False, "do it")  # the last closing tag
    assert check_think_format("a b</think>c") == (False, "c")
    assert check_think_format("no thinking here") == (False, "no thinking here")
    ctx = ReasoningContext("S", "U")
    assert ctx.parse_text("no thinking here") == ("no thinking here", ThinkInfo(format_ok=False, think_words=0))
    assert ctx.parse_text("<think>a b</think> c d</think> e")[1].think_words == 2  # the first block
    assert ctx.parse_text("<think>a b<think>c</think>")[1].think_words == 2  # from the first opening tag
    assert ctx.parse_text("a b</think> c") == ("c", ThinkInfo(format_ok=False, think_words=2))


def test_set_system_replaces_the_text_and_moves_its_segments_after_it():
    """A refreshed system prompt (new tool list) keeps the system message's marked blocks, in order and of their
    kind, re-marked after the new text; other messages and their segments are untouched; the reasoning template
    keeps its instruction. Torch-free."""
    import dataclasses

    from evolvekit.agent.templates import REASONING_INSTRUCTION, Segment

    ctx = ReasoningContext("tools: a", "go")
    first = ctx.insert_experience("tip")
    ctx.segments[0] = dataclasses.replace(first, kind=SpanKind.PROMPT)
    ctx.insert_experience("more")
    hint = ctx.insert_experience("hint", message=1)
    ctx.set_system("tools: a, b")
    head = "tools: a, b" + REASONING_INSTRUCTION
    tip, more = f"\n{EXP_OPEN}\ntip\n</EXP>", f"\n{EXP_OPEN}\nmore\n</EXP>"
    assert ctx.messages[0] == ChatMessage(role="system", content=head + tip + more)
    assert ctx.messages[1] == ChatMessage(role="user", content=f"go\n{EXP_OPEN}\nhint\n</EXP>")
    assert ctx.segments == [
        hint,
        Segment(0, len(head), len(head) + len(tip), SpanKind.PROMPT),
        Segment(0, len(head) + len(tip), len(head) + len(tip) + len(more), SpanKind.EXPERIENCE),
    ]
    basic = BasicContext("old", "go")
    basic.set_system("new")
    assert basic.messages[0].content == "new" and basic.segments == []
