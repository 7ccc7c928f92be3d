"""Requests a person would write, written by the run: back-translation with a round trip (issue 96, item 1).

An executed call is a program; its request is an utterance that the program answers. Instead of printing the tool's
description with the arguments appended ("Add two numbers (a = 1, b = 2)."), the run's own model writes many
candidate requests for each executed call, under several framings, and a hard filter keeps the few that a person
could have written and the policy can act on. The model's words are the request: no text template is put around
them. A candidate is kept only if all of these hold:

1. **values** (``states_exactly``): it states every value the call needs (numbers by value, strings verbatim) and no
   other number;
2. **identifiers** (``names_identifier``): it names no parameter or function identifier as code ("a = 1",
   "add(...)", "`file_name`", a snake_case or camelCase name); a plain word that is also a tool's name ("Add 3 and
   4") is a request, not an identifier;
3. **duplicates** (``near_duplicate``): it is not a near-duplicate (number-masked word overlap) of a request already
   kept for the same call;
4. **round trip**: the policy, given only the request and the run's examples, makes a call that reaches the same
   result (the environment's own check against the executed call) at least once in k samples.

Survivors are ranked by their round-trip pass rate, the measured quality score: a filter run by the same weak policy
favours phrasings it already solves, which is what a worked example wants; for a training task the pass rate is its
first learnability estimate, recorded on the task, and not a gate at 100%.

The method follows cycle-consistent back-translation: GAZP (arXiv 2009.07396) samples programs, generates
utterances for them and keeps those the current parser maps back to the same program; AutoQA (arXiv 2010.04806)
paraphrases and filters by the same round trip. Instruction back-translation (arXiv 2308.06259) is the same idea
for instructions. None of them is in the AgentEvolver papers: this is evolvekit's own, behind
``questioning.requests.mode`` (``documented`` is the template it replaces, kept as the counted fallback).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Sequence

from evolvekit.engine.base import Engine
from evolvekit.env.base import ToolSchema
from evolvekit.llm.base import SamplingParams
from evolvekit.questioning.curate import NUMBER, argument_values, lexical_overlap
from evolvekit.types import ChatMessage, ToolCall

# One executed call with what it returned, and the tool's schema where the environment offers one.
Executed = tuple[ToolCall, str, "ToolSchema | None"]

# The framings a candidate request is asked under: (system, ask). Each ask sees the calls as the environment ran them
# (``shown_calls``) and the tool's own description; the model's reply is the request.
FRAMINGS: tuple[tuple[str, str], ...] = (
    (
        "You are a person chatting with an assistant that can use tools.",
        "The assistant did this for you:\n{calls}\n\nWrite the message you sent to ask for it: one short sentence in "
        "plain everyday words, with every number it needs, and no code.",
    ),
    (
        "You write the questions that people ask a helpful assistant.",
        "A user's question was answered with this computation:\n{calls}\n\nWhat was the user's question? Write only "
        "the question, as the user typed it.",
    ),
    (
        "You rewrite programs as plain English requests.",
        "Program:\n{calls}\n\nSay in one sentence what a person wants when they ask for this, as they would say it, "
        "with the same numbers and values and without the names in the program.",
    ),
)


def shown_calls(executed: Sequence[Executed]) -> str:
    """The calls as a framing shows them: each on its line with its tool's description and its result."""
    lines = []
    for call, output, tool in executed:
        args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in call.arguments.items())
        desc = (tool.description if tool is not None else "").split("Tool description:", 1)[-1].strip()
        about = f"  ({desc.splitlines()[0][:160]})" if desc else ""
        lines.append(f"{call.name}({args}) -> {output[:160]}{about}")
    return "\n".join(lines)


def framing_prompt(framing: int, executed: Sequence[Executed]) -> list[ChatMessage]:
    system, ask = FRAMINGS[framing % len(FRAMINGS)]
    return [
        ChatMessage(role="system", content=system),
        ChatMessage(role="user", content=ask.format(calls=shown_calls(executed))),
    ]


def clean_request(text: str) -> str | None:
    """The request in a model's reply: its first non-empty line, without a label ("User:", "Question:") or
    surrounding quotes and markdown. None when nothing of request length is left."""
    line = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
    line = re.sub(r"[*#`]", "", line).strip()
    quoted = [q for q in re.findall(r'"([^"]+)"|“([^”]+)”', line) for q in q if len(q.strip()) >= 8]
    if quoted:  # 'The user asked: "What is 9 over 3?"': the quoted words are the request
        line = max(quoted, key=len)
    line = _NARRATION.sub("", line).strip()
    line = re.sub(r"^(user|question|request|message|task|me)\s*[:：]\s*", "", line, flags=re.IGNORECASE).strip()
    line = line.strip(" \"'“”")
    return line if 8 <= len(line) <= 300 else None


# a narrator's lead-in before the request: "The user asked:", "A user's question was:", "The user typed:"
_NARRATION = re.compile(
    r"^(the|a)\s+user('s)?\s*(question)?\s*(asked|wrote|typed|said|was|is)?\s*(me|you|this)?\s*[:：]\s*",
    re.IGNORECASE,
)


def documented_request(tool: ToolSchema | None, call: ToolCall) -> str:
    """A request written from the tool's documentation: the first sentence of its description (of the part after
    "Tool description:", where a schema has one), or "Call <name>" where it has none; then every argument of the
    call, so the request states each value its call needs."""
    # BFCL's schemas open with their API's boilerplate, then "Tool description: ..." (its documented format)
    desc = (tool.description if tool is not None else "").split("Tool description:", 1)[-1].strip()
    first = re.split(r"(?<=[.!?])\s", desc, maxsplit=1)[0].strip().rstrip(".!?:; ") if desc else ""
    head = first or f"Call {call.name}"
    args = ", ".join(f"{k} = {json.dumps(v, ensure_ascii=False)}" for k, v in call.arguments.items())
    return f"{head} ({args})." if args else f"{head}."


def unnamed_request(tool: ToolSchema | None, call: ToolCall) -> str:
    """The back-translation's counted fallback: the documented request with the call's values and none of its
    parameter names ("Add two numbers (12, 30)."), so that no request on the default path states an identifier."""
    named = documented_request(tool, call)
    values = ", ".join(json.dumps(v, ensure_ascii=False) for v in call.arguments.values())
    head = named.split(" (", 1)[0].rstrip(".") if call.arguments else named.rstrip(".")
    if head == f"Call {call.name}":  # no description: the function name alone would be the identifier
        head = "Do this"
    return f"{head} ({values})." if values else f"{head}."


def _numbers(values: Sequence) -> list[float]:
    return sorted(float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool))


def states_exactly(text: str, calls: Sequence[ToolCall], carried: Sequence = ()) -> bool:
    """Filter 1: the request states every value its calls need and no other number. The numbers in the text, as a
    multiset, equal the calls' numeric argument values (less ``carried``: values a later call takes from an earlier
    result); every string value appears in the text (case- and space-insensitively). "Add 12 and 30." passes for
    add(12, 30); "Add 12 and 30, then 5." and "Add 12 to a number." do not."""
    values = [v for c in calls for v in argument_values(c.arguments)]
    for v in carried:
        if v in values:
            values.remove(v)
    if sorted(float(x) for x in NUMBER.findall(text)) != _numbers(values):
        return False
    flat = " ".join(text.lower().split())
    return all(" ".join(v.lower().split()) in flat for v in values if isinstance(v, str))


_PLAIN_WORD = re.compile(r"[a-z]+")


def identifiers(calls: Sequence[ToolCall]) -> set[str]:
    """The code names a request must not state: each call's function name and its parameter names (nested ones
    too)."""
    names: set[str] = set()

    def walk(value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                names.add(str(k))
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)

    for c in calls:
        names.add(c.name)
        walk(c.arguments)
    return {n for n in names if n}


def names_identifier(text: str, calls: Sequence[ToolCall]) -> bool:
    """Filter 2: the request names a parameter or function identifier as code. An identifier counts as named when it
    is written as code (followed by ``(``, ``=`` or ``:``, or in backticks or quotes), or, for a name that is no plain
    word (snake_case, camelCase, digits, dots), when it appears at all as a word. "Add a = 1 and b = 2", "Call
    add(1, 2)" and "Set file_name to x" name one; "Add 1 and 2" does not."""
    for name in identifiers(calls):
        n = re.escape(name)
        if re.search(rf"(?<![\w.]){n}\s*[(=:]|[`'\"]{n}[`'\"]", text, flags=re.IGNORECASE):
            return True
        if not _PLAIN_WORD.fullmatch(name) and re.search(rf"(?<![\w.]){n}(?![\w])", text, flags=re.IGNORECASE):
            return True
    return False


def masked(text: str) -> str:
    """The request with its numbers masked, lower-cased: near-duplicates differ in nothing else."""
    return NUMBER.sub("#", text.lower())


def near_duplicate(text: str, kept: Sequence[str], threshold: float) -> bool:
    """Filter 3: ``text`` shares at least ``threshold`` of its words (numbers masked; the lexical dedup's overlap) with
    a request already kept."""
    return any(lexical_overlap(masked(text), masked(k)) >= threshold for k in kept)


@dataclass
class RequestFunnel:
    """What became of the candidate requests: sampled, each filter's drops, kept; and the calls that kept none and fell
    back to the documented-request template (counted, reported)."""

    calls: int = 0  # executed calls (or windows of calls) a request was written for
    candidates: int = 0
    unparseable: int = 0  # no request-length line in the reply
    values: int = 0  # filter 1
    identifiers: int = 0  # filter 2
    duplicates: int = 0  # filter 3
    surplus: int = 0  # passed filters 1-3 beyond the shortlist (not round-tripped: bounded work)
    round_trip: int = 0  # filter 4: no success in k samples
    kept: int = 0
    fallback: int = 0  # calls with no surviving candidate: the documented template, counted

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def add(self, other: RequestFunnel) -> None:
        for k, v in other.as_dict().items():
            setattr(self, k, getattr(self, k) + v)

    def line(self) -> str:
        d = self.as_dict()
        return ", ".join(f"{k} {v}" for k, v in d.items())


@dataclass(frozen=True)
class RequestFilters:
    """Which filters run (each can be switched off; ``questioning.requests``) and their settings."""

    values: bool = True
    identifiers: bool = True
    dedup_threshold: float = 0.8  # > 1 switches filter 3 off
    round_trip: bool = True
    shortlist: int = 4  # at most this many static survivors per call go to the round trip (bounded work)


@dataclass
class Candidate:
    """A request that passed the static filters, with its framing and, after the round trip, its pass rate."""

    request: str
    framing: int
    pass_rate: float | None = None
    rewards: list[float] = field(default_factory=list)


def static_survivors(
    texts: Sequence[tuple[str, int]],
    calls: Sequence[ToolCall],
    filters: RequestFilters,
    funnel: RequestFunnel,
    carried: Sequence = (),
    earlier: Sequence[Candidate] = (),
) -> list[Candidate]:
    """Filters 1-3 over sampled (reply, framing) pairs, in order; each drop counted in ``funnel``. At most
    ``filters.shortlist`` survivors, ``earlier`` ones (an earlier round's, compared for duplicates) included."""
    kept: list[Candidate] = []
    for text, framing in texts:
        funnel.candidates += 1
        request = clean_request(text)
        if request is None:
            funnel.unparseable += 1
        elif filters.values and not states_exactly(request, calls, carried):
            funnel.values += 1
        elif filters.identifiers and names_identifier(request, calls):
            funnel.identifiers += 1
        elif near_duplicate(request, [c.request for c in [*earlier, *kept]], filters.dedup_threshold):
            funnel.duplicates += 1
        elif len(earlier) + len(kept) < filters.shortlist:
            kept.append(Candidate(request, framing))
        else:
            funnel.surplus += 1  # passed every text filter, beyond the shortlist: not round-tripped
    return kept


def ranked(candidates: Sequence[Candidate], filters: RequestFilters, funnel: RequestFunnel) -> list[Candidate]:
    """Filter 4 and the ranking: with the round trip on, only candidates with at least one success, by pass rate
    (then their sampling order); without it, in sampling order. Drops counted in ``funnel``."""
    if not filters.round_trip:
        return list(candidates)
    passed = [c for c in candidates if c.pass_rate is not None and c.pass_rate > 0]
    funnel.round_trip += len(candidates) - len(passed)
    order = {id(c): i for i, c in enumerate(candidates)}
    return sorted(passed, key=lambda c: (-(c.pass_rate or 0.0), order[id(c)]))


REQUEST_TOKENS = 64  # a candidate request's token budget (a request is one line of at most 300 characters)

Seed = tuple[ToolCall, str, "ToolSchema | None", str]  # an executed call, its result, its tool, and a kept request


def shot_messages(framing: int, seeds: Sequence[Seed]) -> list[ChatMessage]:
    """Kept requests as chat turns of ``framing``: its ask over the seed's call, then the request as the reply."""
    system, ask = FRAMINGS[framing % len(FRAMINGS)]
    out = []
    for call, output, tool, request in seeds:
        out += [
            ChatMessage(role="user", content=ask.format(calls=shown_calls([(call, output, tool)]))),
            ChatMessage(role="assistant", content=request),
        ]
    return out


def bootstrap_shots(ask: Sequence[Executed], seeds: Sequence[Seed], k: int, turn: int) -> list[Seed]:
    """Up to ``k`` seeds to show for ``ask``: never one of the ask's own calls, seeds of other tools first, rotated
    by ``turn`` so that asks do not all see the same ones."""
    own = {json.dumps([c.name, c.arguments], sort_keys=True, default=str) for c, _, _ in ask}
    names = {c.name for c, _, _ in ask}
    usable = [s for s in seeds if json.dumps([s[0].name, s[0].arguments], sort_keys=True, default=str) not in own]
    other = [s for s in usable if s[0].name not in names] or usable
    if not other:
        return []
    start = turn % len(other)
    rotated = other[start:] + other[:start]
    picked: list[Seed] = []
    for s in rotated:  # distinct tools first
        if len(picked) < k and all(p[0].name != s[0].name for p in picked):
            picked.append(s)
    return picked


class RequestWriter:
    """Samples candidate requests for executed calls (the run's own model, seeded by its role's sampling settings;
    one line each) and keeps the ones the text filters pass, in two rounds:

    1. zero-shot, unless ``seeds`` are given: ``per_framing`` answers under each framing;
    2. bootstrapped (AutoQA's iteration): each ask is shown up to ``shots`` requests the run already kept for other
       calls (the seeds, else the first round's survivors), as chat turns, and ``per_framing`` more are sampled
       under each framing. A 135M model rarely writes a request that states its values zero-shot (4 of 32 in a
       probe); shown two of its own kept requests it does most of the time (26 of 32).
    """

    def __init__(
        self,
        engine: Engine,
        params: SamplingParams,
        per_framing: int,
        framings: int = len(FRAMINGS),
        shots: int = 2,
    ):
        self.engine, self.per_framing, self.framings, self.shots = engine, per_framing, framings, shots
        # one line of request length: a reply that rambles past it would be cut to no request anyway
        tokens = min(params.max_new_tokens, REQUEST_TOKENS)
        self.params = replace(params, n=per_framing, stop=tuple(params.stop) + ("\n",), max_new_tokens=tokens)

    def sample(
        self, asks: Sequence[Sequence[Executed]], shown: Sequence[Sequence[Seed]] = ()
    ) -> list[list[tuple[str, int]]]:
        """Per ask, its (reply, framing) answers: zero-shot (no ``shown``) under every framing; bootstrapped
        (``shown[i]``: the seeds ask i sees as turns) under one framing per ask, rotated (ask i: framing i mod F),
        since shown requests carry most of the effect and every sample costs its prompt's prefill."""
        if not asks:
            return []
        prompts, owners = [], []
        for i, ex in enumerate(asks):
            seen = shown[i] if shown else ()
            for f in [i % self.framings] if shown else range(self.framings):
                p = framing_prompt(f, ex)
                prompts.append(p[:1] + shot_messages(f, seen) + p[1:])
                owners.append((i, f))
        outs = self.engine.chat(prompts, self.params)
        per: list[list[tuple[str, int]]] = [[] for _ in asks]
        for (i, f), out in zip(owners, outs):
            per[i] += [(o.text, f) for o in out]
        return per

    def candidates(
        self,
        asks: Sequence[Sequence[Executed]],
        filters: RequestFilters,
        funnel: RequestFunnel,
        seeds: Sequence[Seed] = (),
        carried: Sequence[Sequence] = (),
    ) -> list[list[Candidate]]:
        """Per ask, its shortlist of candidates that pass the text filters (both rounds, counted in ``funnel``)."""
        funnel.calls += len(asks)
        kept: list[list[Candidate]] = [[] for _ in asks]
        calls = [[c for c, _, _ in ex] for ex in asks]
        own = [list(carried[i]) if i < len(carried) else [] for i in range(len(asks))]
        pool = list(seeds)
        if not pool:
            for i, texts in enumerate(self.sample(asks)):
                kept[i] = static_survivors(texts, calls[i], filters, funnel, own[i])
            pool = [
                (ex[0][0], ex[0][1], ex[0][2], c.request) for ex, sl in zip(asks, kept) if len(ex) == 1 for c in sl[:1]
            ]
        if pool and self.shots:
            shown = [bootstrap_shots(ex, pool, self.shots, i) for i, ex in enumerate(asks)]
            for i, texts in enumerate(self.sample(asks, shown)):
                more = static_survivors(texts, calls[i], filters, funnel, own[i], kept[i])
                kept[i] += more
        return kept


# The round trip: per task (a candidate request with the executed calls as its reference), the rewards of k policy
# attempts, each scored by the environment's own check; the factory is what the policy acts in (which examples show).
RoundTrip = Callable[[Sequence, Callable[[], object]], list[list[float]]]


def pass_rate(rewards: Sequence[float]) -> float:
    """The share of attempts that succeeded (reward ≥ 1: the environment's check passed)."""
    return sum(1 for r in rewards if r >= 1.0) / len(rewards) if rewards else 0.0
