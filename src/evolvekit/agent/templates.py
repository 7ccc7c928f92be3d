"""The four context templates of AgentEvolver §6.2, over the live context timeline.

- ``basic``: causal history — system, (worked examples), user, then assistant / tool-result messages in order.
- ``reasoning``: the policy thinks inside ``<think>…</think>`` before acting; a format check records whether it did
  (``Step.format_ok``, and ``Step.think_words``) and the action is parsed from the text after the thinking. The
  reasoning reward that §6.2.1 pairs with it is ``train/rewards.py: reasoning_reward``.
- ``sliding_window``: past ``context_token_limit`` tokens, the oldest interaction messages are summarised into one
  memory message by the summariser (the run wires the ``summarizer`` role; a deterministic truncation is only the
  fallback when no summariser is given or it fails).
- ``self_managing``: past the limit, the policy itself decides per message keep / remove / compress; "compress"
  replaces the message by the summariser's summary of it (§6.2.1: "via an external summarizing LLM").

Inserted text (retrieved experience) is kept as a *marked segment* of a message; ``tokenize`` returns the exact
token span of every segment inside the prompt (from the tokenizer's offsets), so it can be stripped by position
later (§4.3), never by pattern matching.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

from evolvekit.llm.base import LLM, Completion, SamplingParams
from evolvekit.types import ChatMessage, SpanKind, TokenSpan

log = logging.getLogger(__name__)

EXP_OPEN, EXP_CLOSE = "<EXP>", "</EXP>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
REASONING_INSTRUCTION = (
    "\nBefore every answer, think step by step inside <think>...</think>, then give the tool call "
    "or your final message after the closing </think>."
)
MEMORY_PREFIX = "Memory of the earlier interaction (summarised):\n"
COMPRESS_CHARS = 200


@dataclass(frozen=True)
class ThinkInfo:
    """What the reasoning template checked of a reply (None: a template without a thinking part)."""

    format_ok: bool | None = None
    think_words: int | None = None


@dataclass(frozen=True)
class Segment:
    """A marked character range inside one message's content (e.g. inserted experience)."""

    message: int
    start: int
    end: int
    kind: SpanKind = SpanKind.EXPERIENCE


@dataclass
class ContextEvent:
    kind: str  # "summarise" | "manage"
    detail: str


class BasicContext:
    """The basic causal template: system prompt (tools + format), examples, then the interaction in order."""

    template = "basic"

    def __init__(self, system_prompt: str, first_user_message: str, examples: list[ChatMessage] | None = None) -> None:
        self.messages: list[ChatMessage] = [
            ChatMessage(role="system", content=system_prompt),
            *(examples or []),
            ChatMessage(role="user", content=first_user_message),
        ]
        self.segments: list[Segment] = []
        self.events: list[ContextEvent] = []
        # the policy's own context-management generations (self-managing template), taken by the rollout as
        # trained steps; other templates make none
        self.decisions: list[Completion] = []
        self.protected = len(self.messages)  # system, examples and the first request are never summarised away

    # -- the timeline -------------------------------------------------------------------------------------------
    def add_assistant(self, text: str) -> None:
        self.messages.append(ChatMessage(role="assistant", content=text))

    def add_observation(self, text: str) -> None:
        # ChatML models without a tool role read tool results as a user message with a clear prefix.
        self.messages.append(ChatMessage(role="user", content=f"Tool results:\n{text}"))

    def add_user(self, text: str) -> None:
        self.messages.append(ChatMessage(role="user", content=text))

    def set_system(self, text: str) -> None:
        """Replace the system prompt (e.g. a refreshed tool list), keeping its inserted segments after it."""
        old = self.messages[0].content
        blocks = [(old[seg.start : seg.end], seg.kind) for seg in self.segments if seg.message == 0]
        self.segments = [seg for seg in self.segments if seg.message != 0]
        self.messages[0] = self.messages[0].model_copy(update={"content": self._system_text(text)})
        for block, kind in blocks:
            content = self.messages[0].content
            self.messages[0] = self.messages[0].model_copy(update={"content": content + block})
            self.segments.append(Segment(message=0, start=len(content), end=len(content) + len(block), kind=kind))

    def _system_text(self, text: str) -> str:
        return text

    def insert_experience(self, text: str, message: int = 0) -> Segment:
        """Append ``<EXP>text</EXP>`` to a message (default: the system prompt) and mark it as a segment."""
        block = f"\n{EXP_OPEN}\n{text}\n{EXP_CLOSE}"
        content = self.messages[message].content
        seg = Segment(message=message, start=len(content), end=len(content) + len(block))
        self.messages[message] = self.messages[message].model_copy(update={"content": content + block})
        self.segments.append(seg)
        return seg

    # -- hooks for the rollout ------------------------------------------------------------------------------------
    def prepare(self, llm: LLM) -> None:
        """Called before each generation (templates that manage their length act here)."""

    def parse_text(self, text: str) -> tuple[str, ThinkInfo]:
        """The part of the model's text that carries the action, and what the template checked of the rest."""
        return text, ThinkInfo()

    # -- tokenisation with spans ------------------------------------------------------------------------------------
    def tokenize(self, llm) -> tuple[list[int], list[TokenSpan]]:
        return tokenize_with_segments(llm, self.messages, self.segments)


def tokenize_with_segments(
    llm, messages: Sequence[ChatMessage], segments: Sequence[Segment]
) -> tuple[list[int], list[TokenSpan]]:
    """Prompt ids exactly as ``apply_chat_template`` gives them, plus the token span of every marked segment.

    Spans are found through the tokenizer's character offsets on the rendered chat template; a token that
    straddles a segment boundary belongs to the segment (stripping removes it whole).
    """
    ids = llm.apply_chat_template(messages)
    if not segments:
        return ids, []
    tok = llm.tokenizer
    text = tok.apply_chat_template(
        [m.model_dump(exclude_none=True) for m in messages], tokenize=False, add_generation_prompt=True
    )
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    if list(enc["input_ids"]) != list(ids):
        raise ValueError("the tokenizer does not reproduce the chat template's ids; cannot locate segments")
    # character offset of each message's content in the rendered text (contents appear in order)
    starts, cursor = [], 0
    for m in messages:
        pos = text.find(m.content, cursor)
        if pos < 0:
            raise ValueError("a message's content is not verbatim in the rendered chat template")
        starts.append(pos)
        cursor = pos + len(m.content)
    spans = []
    for seg in segments:
        a, b = starts[seg.message] + seg.start, starts[seg.message] + seg.end
        toks = [i for i, (s, e) in enumerate(enc["offset_mapping"]) if e > a and s < b]
        if toks:
            spans.append(TokenSpan(start=toks[0], end=toks[-1] + 1, kind=seg.kind))
    return ids, spans


class ReasoningContext(BasicContext):
    """Reasoning-augmented template: ``<think>`` before acting, with a format check."""

    template = "reasoning"

    def __init__(self, system_prompt: str, first_user_message: str, examples: list[ChatMessage] | None = None) -> None:
        super().__init__(system_prompt + REASONING_INSTRUCTION, first_user_message, examples)

    def _system_text(self, text: str) -> str:
        return text + REASONING_INSTRUCTION

    def parse_text(self, text: str) -> tuple[str, ThinkInfo]:
        ok, action = check_think_format(text)
        think = text.split(THINK_OPEN, 1)[-1].split(THINK_CLOSE, 1)[0] if THINK_CLOSE in text else ""
        return action, ThinkInfo(format_ok=ok, think_words=len(think.split()))


def check_think_format(text: str) -> tuple[bool, str]:
    """(format ok, action text): ok when the text opens with one ``<think>…</think>`` block; the action follows it."""
    stripped = text.lstrip()
    if stripped.startswith(THINK_OPEN) and stripped.count(THINK_CLOSE) == 1 and stripped.count(THINK_OPEN) == 1:
        return True, stripped.split(THINK_CLOSE, 1)[1].strip()
    if THINK_CLOSE in text:  # malformed but recoverable: act on what follows the last closing tag
        return False, text.rsplit(THINK_CLOSE, 1)[1].strip()
    return False, text


def _token_count(llm, messages: Sequence[ChatMessage]) -> int:
    return len(llm.apply_chat_template(messages))


def truncation_summary(messages: Sequence[ChatMessage], chars: int = 160) -> str:
    """Deterministic fallback summary: each message's role and first characters."""
    return "\n".join(
        f"- {m.role}: {m.content[:chars].strip()}" + ("…" if len(m.content) > chars else "") for m in messages
    )


def llm_summariser(llm: LLM, params: SamplingParams) -> Callable[[Sequence[ChatMessage]], str]:
    def summarise(messages: Sequence[ChatMessage]) -> str:
        body = "\n".join(f"{m.role.upper()}: {m.content}" for m in messages)
        conv = [
            ChatMessage(role="system", content="You compress an agent's interaction history."),
            ChatMessage(
                role="user",
                content="Summarise this interaction in a few short lines. Keep every tool "
                f"result, value and file name that may matter later.\n\n{body}",
            ),
        ]
        text = llm.chat([conv], params)[0][0].text.strip()
        return text or truncation_summary(messages)

    return summarise


class SlidingWindowContext(BasicContext):
    """Past ``token_limit`` tokens, summarise the oldest half of the interaction into one memory message."""

    template = "sliding_window"

    def __init__(
        self,
        system_prompt: str,
        first_user_message: str,
        examples: list[ChatMessage] | None = None,
        token_limit: int = 4096,
        summarise: Callable[[Sequence[ChatMessage]], str] | None = None,
    ) -> None:
        super().__init__(system_prompt, first_user_message, examples)
        self.token_limit = token_limit
        self.summarise = summarise or truncation_summary

    def prepare(self, llm) -> None:
        if _token_count(llm, self.messages) <= self.token_limit:
            return
        body = self.messages[self.protected :]
        if len(body) < 2:
            return
        cut = max(1, len(body) // 2)
        old, keep = body[:cut], body[cut:]
        memory = [m for m in old if m.content.startswith(MEMORY_PREFIX)]  # an earlier memory is folded in
        try:
            summary = self.summarise(old)
        except Exception as err:  # the summariser is a helper: never lose the episode to it
            log.warning("summariser failed (%s); using truncation", err)
            summary = truncation_summary(old)
        self.messages = (
            self.messages[: self.protected] + [ChatMessage(role="user", content=MEMORY_PREFIX + summary)] + keep
        )
        self.segments = [s for s in self.segments if s.message < self.protected]
        self.events.append(ContextEvent("summarise", f"{len(old)} messages -> memory ({len(memory)} earlier memories)"))


_DECISION = re.compile(r"\[?(\d+)\]?\s*[:=\-]\s*(keep|remove|compress)", re.IGNORECASE)


class SelfManagingContext(BasicContext):
    """Past ``token_limit`` tokens, the policy decides keep / remove / compress for each interaction message."""

    template = "self_managing"

    def __init__(
        self,
        system_prompt: str,
        first_user_message: str,
        examples: list[ChatMessage] | None = None,
        token_limit: int = 4096,
        params: SamplingParams | None = None,
        summarise: Callable[[Sequence[ChatMessage]], str] | None = None,
    ) -> None:
        super().__init__(system_prompt, first_user_message, examples)
        self.token_limit = token_limit
        self.params = params or SamplingParams(temperature=0.0, max_new_tokens=128)
        self.summarise = summarise or truncation_summary

    def management_prompt(self) -> list[ChatMessage]:
        body = self.messages[self.protected :]
        listing = "\n".join(f"[{i}] {m.role}: {m.content[:COMPRESS_CHARS]}" for i, m in enumerate(body))
        return [
            ChatMessage(
                role="system",
                content="Your context is too long. Decide for each numbered message: keep, "
                "remove, or compress. Answer one line per message like `3: remove`.",
            ),
            ChatMessage(role="user", content=listing),
        ]

    def apply_decisions(self, text: str) -> dict[int, str]:
        body = self.messages[self.protected :]
        decisions = {int(m.group(1)): m.group(2).lower() for m in _DECISION.finditer(text or "")}
        new_body = []
        for i, m in enumerate(body):
            d = decisions.get(i, "keep")
            if i == len(body) - 1:
                d = "keep"  # the newest message is what the policy must answer next
            if d == "remove":
                continue
            if d == "compress":
                try:
                    summary = self.summarise([m]).strip()
                except Exception as err:  # a helper: never lose the episode to it
                    log.warning("summariser failed (%s); using truncation", err)
                    summary = truncation_summary([m])
                m = m.model_copy(update={"content": f"[compressed] {summary}"})
            new_body.append(m)
        self.messages = self.messages[: self.protected] + new_body
        self.segments = [s for s in self.segments if s.message < self.protected]
        return decisions

    def prepare(self, llm) -> None:
        if _token_count(llm, self.messages) <= self.token_limit or len(self.messages) - self.protected < 2:
            return
        try:
            comp = llm.chat([self.management_prompt()], self.params)[0][0]
            text = comp.text
            if comp.prompt_token_ids and comp.token_ids:  # trainable: the engine gave its exact tokens (§6.2.1)
                self.decisions.append(comp)
        except Exception as err:
            log.warning("context management call failed (%s); keeping everything", err)
            text = ""
        decisions = self.apply_decisions(text)
        self.events.append(
            ContextEvent("manage", ", ".join(f"{k}:{v}" for k, v in sorted(decisions.items())) or "none")
        )


@dataclass
class TemplateSettings:
    template: str = "basic"
    token_limit: int = 4096
    summarise: Callable[[Sequence[ChatMessage]], str] | None = None
    extra: dict = field(default_factory=dict)
    # the self-managing decisions' sampling (``rollout.manage_sampled``: the policy's); None = greedy
    manage_params: SamplingParams | None = None


def make_context(
    settings: TemplateSettings, system_prompt: str, first_user_message: str, examples: list[ChatMessage] | None = None
) -> BasicContext:
    if settings.template == "basic":
        return BasicContext(system_prompt, first_user_message, examples)
    if settings.template == "reasoning":
        return ReasoningContext(system_prompt, first_user_message, examples)
    if settings.template == "sliding_window":
        return SlidingWindowContext(
            system_prompt, first_user_message, examples, settings.token_limit, settings.summarise
        )
    if settings.template == "self_managing":
        return SelfManagingContext(
            system_prompt,
            first_user_message,
            examples,
            settings.token_limit,
            params=settings.manage_params,
            summarise=settings.summarise,
        )
    raise ValueError(f"unknown context template '{settings.template}'")
