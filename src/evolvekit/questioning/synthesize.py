"""Adaptive task synthesis with reference-solution extraction (AgentEvolver §3.2, Eq. 10).

The exploration trajectory is distilled to its successfully executed calls with their results (numbered). The
synthesizer gets them with the user's preferences — difficulty as the number of entities, attributes and
operations a task should involve, plus free-text style rubrics — and writes tasks, each naming the numbered
calls that solve it. The reference solution is exactly those explored calls (never text the model invents), so
every reference is an action that really executed in the sandbox.

Multi-turn tasks (``difficulty.turns`` ≥ 2, evolvekit's own): a *chain* of explored calls in which each call takes
a value from the previous call's result (add(1, 10) -> 11, then multiply(11, 10)) becomes one task with a turn per
call. The first turn's request states its values; each later turn's request refers to the earlier result instead of
repeating it ("Now multiply the result by 10."), so the agent must read the value from the tool's answer, as in a
multi-turn family. The values a turn takes from an earlier result are recorded (``carried_values``) and are not
asked of the request by the grounding checks.

One request over dependent calls (``difficulty.chained``, evolvekit's own): the same chains, of
``difficulty.operations`` calls, become a single-turn task whose one request states the first call's values and
refers to each earlier result ("Add 1 and 10, then multiply the sum by 10."), as in a single-request chain family;
the reference is the whole chain, so the agent must make every call before it answers.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from evolvekit.config import DifficultyConfig
from evolvekit.engine.base import Engine
from evolvekit.env.action_text import format_call
from evolvekit.env.base import ToolSchema
from evolvekit.llm.base import SamplingParams, offset_seed
from evolvekit.llm.constrain import NumberConstraint, NumberVocabulary, number_strings
from evolvekit.questioning.curate import NUMBER, ToolAgreement, argument_values, same_value, stated_count
from evolvekit.questioning.explore import ExplorationTrace
from evolvekit.questioning.requests import (
    RequestFilters,
    RequestFunnel,
    RequestWriter,
    Seed,
    documented_request,
    names_identifier,
    states_exactly,
    unnamed_request,
)
from evolvekit.types import ChatMessage, Difficulty, Task, TaskSource, ToolCall, new_id

SYNTH_SYSTEM = """You write realistic user requests for an AI agent that uses tools.
You are shown calls that were executed in an environment and their results. Write requests a user could make
that are solved exactly by some of these calls, in order."""


def distill(trace: ExplorationTrace, max_chars: int = 300) -> list[tuple[ToolCall, str]]:
    """The successfully executed calls of an exploration, in order, with (shortened) results."""
    return [(call, obs[:max_chars]) for _, call, obs in trace.successful_calls()]


def synthesis_prompt(
    calls: Sequence[tuple[ToolCall, str]], difficulty: DifficultyConfig, rubrics: Sequence[str], n_tasks: int
) -> list[ChatMessage]:
    listing = _listing(calls)
    prefs = (
        f"Each request should involve about {difficulty.entities} entities, {difficulty.attributes} attributes "
        f"and {difficulty.operations} operations (fewer if the calls do not allow it)."
    )
    if rubrics:
        prefs += "\nStyle: " + "; ".join(rubrics)
    fmt = (
        "Write {n} requests, each exactly as:\nTask: <the user's request, self-contained, with every value it needs>\n"
        "Solution: <the numbers of the calls that solve it, in order, e.g. 0, 2>"
    ).format(n=n_tasks)
    return [
        ChatMessage(role="system", content=SYNTH_SYSTEM),
        ChatMessage(role="user", content=f"Executed calls:\n{listing}\n\n{prefs}\n\n{fmt}"),
    ]


_TASK = re.compile(r"task\s*[:：]\s*(.+?)\s*\n\s*solution\s*[:：]\s*([\d,\s\[\]and]+)", re.IGNORECASE)


def parse_synthesis(text: str, n_calls: int) -> list[tuple[str, list[int]]]:
    """(query, call indices) pairs; indices outside the listing, or an empty solution, drop the item."""
    out = []
    for m in _TASK.finditer(re.sub(r"[*_#`]", "", text or "")):
        query = m.group(1).strip()
        idx = [int(x) for x in re.findall(r"\d+", m.group(2))]
        if query and idx and all(0 <= i < n_calls for i in idx):
            out.append((query, idx))
    return out


TARGETED_ASK = (
    "Write the user's request that exactly these calls solve: one sentence, self-contained, with every value it needs."
)


def targeted_prompt(calls: Sequence[tuple[ToolCall, str]], shots: Sequence[tuple[str, str]] = ()) -> list[ChatMessage]:
    """Scaffold for small synthesizers: the calls are chosen (a window of the exploration); the model only writes
    the request they solve. ``shots`` are (call listing, request) worked examples given as chat turns."""
    return _asking(TARGETED_ASK, calls, shots)


def _asking(ask: str, calls: Sequence[tuple[ToolCall, str]], shots: Sequence[tuple[str, str]]) -> list[ChatMessage]:
    """The synthesizer's conversation: the worked examples as chat turns, then the listed calls and ``ask``."""
    msgs = [ChatMessage(role="system", content=SYNTH_SYSTEM)]
    for listing, request in shots:
        msgs += [
            ChatMessage(role="user", content=f"Executed calls:\n{listing}\n\n{ask}"),
            ChatMessage(role="assistant", content=request),
        ]
    return msgs + [ChatMessage(role="user", content=f"Executed calls:\n{_listing(calls)}\n\n{ask}")]


def _listing(calls: Sequence[tuple[ToolCall, str]]) -> str:
    return "\n".join(f"[{i}] {format_call(c)} -> {obs}" for i, (c, obs) in enumerate(calls))


def parse_request(text: str) -> str | None:
    """The request of a targeted-synthesis answer: its first line, without a 'Task:' label or quotes. None for an
    answer that is no request: a call, a line that points into the call listing ("Result of [1] is 1.0.", an
    echo of the instruction "... which call [1] solves"), or one that repeats the instruction's words."""
    line = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
    line = re.sub(
        r"^(task|request|user)\s*[:：]\s*", "", re.sub(r"[*_#`]", "", line).strip(), flags=re.IGNORECASE
    ).strip(" \"'")
    if len(line) < 8 or len(line) > 400 or "<tool" in line or line.startswith("{") or _LISTING_REF.search(line):
        return None
    return None if echoes_instruction(line) else line


_LISTING_REF = re.compile(r"\[\d+\]")  # "[1]": a numbered call of the synthesizer's listing
_ECHO_WORDS = 4


def _ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    w = re.findall(r"[a-z0-9']+", text.lower())
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def echoes_instruction(line: str) -> bool:
    """True when ``line`` repeats four or more consecutive words of the synthesizer's own instruction ("Only 1
    sentence, self-contained, with every value it needs." echoes the targeted ask): an echo, not a request."""
    return bool(_ngrams(line, _ECHO_WORDS) & _instruction_ngrams())


@functools.cache
def _instruction_ngrams() -> set[tuple[str, ...]]:
    return _ngrams(TARGETED_ASK, _ECHO_WORDS) | _ngrams(FOLLOW_UP_ASK, _ECHO_WORDS) | _ngrams(CHAIN_ASK, _ECHO_WORDS)


def best_request(
    texts: Sequence[str],
    calls: Sequence[ToolCall],
    values: Sequence,
    agreement: ToolAgreement | None = None,
    order: Sequence[Sequence] = (),
) -> str | None:
    """Of several sampled answers for ``calls``, the request that states most of ``values`` (the calls' own values)
    and, with ``agreement``, asks for the calls' tools (questioning.tool_agreement's test), then, with ``order``
    (per call, the values its request states), states them in call order (``states_in_order``); the first such one
    on a tie, None if no answer is a request."""
    requests = [r for r in (parse_request(t) for t in texts) if r is not None]
    if not requests:
        return None

    def key(r: str) -> tuple[int, bool, bool]:
        agrees = agreement is not None and agreement.turn_agrees(r, calls)
        return stated_count(r, values), agrees, bool(order) and states_in_order(r, order)

    return max(requests, key=key)


def states_in_order(text: str, per_call: Sequence[Sequence]) -> bool:
    """Each call's numbers occur in the request after the previous calls' numbers ("Add 2 and 5, then multiply the
    sum by 3." for add(2, 5), multiply(7, 3); not "Add 2 and 3, then multiply it by 5."), so a request over a chain
    gives each call its own values. Values the request does not state, and strings, are not judged."""
    found = [float(x) for x in NUMBER.findall(text)]
    last = -1  # where the previous calls' numbers end
    for vals in per_call:
        chosen = []
        for v in vals:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            at = [i for i, x in enumerate(found) if x == float(v)]
            if at and not any(i > last for i in at):
                return False
            chosen += [next(i for i in at if i > last)] if at else []
        last = max(chosen, default=last)
    return True


def windows(n_calls: int, size: int, count: int) -> list[list[int]]:
    """Up to ``count`` distinct windows of ``size`` consecutive call indices, spread over the exploration."""
    size = max(1, min(size, n_calls))
    starts = sorted({round(i * (n_calls - size) / max(count - 1, 1)) for i in range(count)}) if n_calls > size else [0]
    return [list(range(st, st + size)) for st in starts][:count]


def _is_result(m: ChatMessage) -> bool:
    """A worked example's tool-result turn (the environment's, in the user role), not a request."""
    return m.role == "user" and m.content.startswith("Tool results")


def _observation(result: ChatMessage) -> str:
    """A worked example's tool result as a listing shows it (without its "Tool results:" header, shortened)."""
    return result.content.replace("Tool results:\n", "").strip()[:300]


def chain_values(calls: Sequence[tuple[ToolCall, str]], chain: Sequence[int]) -> list[list]:
    """Per call of ``chain``, the argument values a request must state: its own, less those it takes from the
    previous call's result (``carried``)."""
    out = []
    for t, i in enumerate(chain):
        own = argument_values(calls[i][0].arguments)
        if t > 0:
            for v in carried(calls[chain[t - 1]], calls[i][0]):
                own.remove(v)
        out.append(own)
    return out


def shots_from_examples(examples: Sequence[ChatMessage]) -> list[tuple[str, str]]:
    """(call listing, request) pairs out of an environment's worked examples (user turn, call, tool result).

    Only self-contained requests become shots: one that leaves a value of its calls unstated ("Multiply that by
    3." for multiply(12, 3), a later turn of a multi-turn example) is what the synthesizer is asked not to write,
    and copying it made half the requests a 135M synthesizer wrote refer to a result that a single-turn task does
    not have (benchmarks/results/synthetic_task_audit.md)."""
    from evolvekit.env.action_text import parse_action
    from evolvekit.questioning.curate import grounding

    shots = []
    for i in range(len(examples) - 2):
        user, call, result = examples[i], examples[i + 1], examples[i + 2]
        if user.role != "user" or call.role != "assistant" or not user.content.strip():
            continue  # an empty request is no worked example
        calls = parse_action(call.content).tool_calls
        if calls and grounding(Task(env_name="", query=user.content, reference_solution=[calls])) >= 1.0:
            obs = _observation(result)
            shots.append((_listing([(c, obs) for c in calls]), user.content))
    return shots


def result_values(observation: str) -> list:
    """The literal values a call's result shows: the leaves of the JSON object in its observation
    (``[add] {"result": 11}`` -> [11]), else the numbers in its text."""
    start, end = observation.find("{"), observation.rfind("}")
    if 0 <= start < end:
        try:
            return argument_values(json.loads(observation[start : end + 1]))
        except ValueError:
            pass
    return [float(x) for x in NUMBER.findall(observation)]


def carried(prev: tuple[ToolCall, str], call: ToolCall) -> list:
    """The argument values of ``call`` that ``prev``'s result shows and ``prev``'s own arguments do not: what the
    later call takes from the earlier one's answer (multiply(11, 10) after add(1, 10) -> 11 carries [11])."""
    shown, own = result_values(prev[1]), argument_values(prev[0].arguments)
    return [
        v
        for v in argument_values(call.arguments)
        if any(same_value(v, x) for x in shown) and not any(same_value(v, x) for x in own)
    ]


def links(prev: tuple[ToolCall, str], call: ToolCall) -> bool:
    """``call`` can be a later turn after ``prev``: it takes a value from ``prev``'s result and has a value of its
    own for its request to state (add(2.0, 2.0) after add(1.0, 1.0) -> 2.0 takes both and leaves nothing to ask)."""
    taken = carried(prev, call)
    return bool(taken) and len(argument_values(call.arguments)) > len(taken)


def chains(calls: Sequence[tuple[ToolCall, str]], turns: int, limit: int) -> list[list[int]]:
    """Up to ``limit`` chains of ``turns`` explored calls i_1 < … < i_T in which every call takes a value from
    its predecessor's result (``links``; each link to the nearest such predecessor); each call ends at most one
    chain."""
    out: list[list[int]] = []
    for end in range(len(calls)):
        chain = [end]
        while len(chain) < turns:
            j = chain[0]
            i = next((i for i in range(j - 1, -1, -1) if links(calls[i], calls[j][0])), None)
            if i is None:
                break
            chain.insert(0, i)
        if len(chain) == turns and turns > 1:
            out.append(chain)
    if len(out) <= limit:
        return out
    return [out[round(k * (len(out) - 1) / max(limit - 1, 1))] for k in range(limit)] if limit > 0 else []


FOLLOW_UP_ASK = (
    "The user asked for call [0] and saw its result. Write the user's next request, which call [1] solves: one "
    "sentence that refers to that result instead of repeating its value, with every other value it needs."
)


def follow_up_prompt(
    prev: tuple[ToolCall, str], call: tuple[ToolCall, str], shots: Sequence[tuple[str, str]] = ()
) -> list[ChatMessage]:
    """A later turn of a multi-turn task: the earlier call with its result and this turn's call; the model writes
    the request that refers to the earlier result. ``shots``: (listing, request) worked examples as chat turns."""
    return _asking(FOLLOW_UP_ASK, [prev, call], shots)


def follow_up_shots(examples: Sequence[ChatMessage]) -> list[tuple[str, str]]:
    """(listing, request) pairs out of an environment's multi-turn worked examples: a user turn after an earlier
    turn's answer whose call carries a value from the earlier call's result ("Multiply that by 3." for
    multiply(12, 3) after add(5, 7) -> 12)."""
    from evolvekit.env.action_text import parse_action

    shots = []
    last: tuple[ToolCall, str] | None = None  # the latest executed call and its result
    for i in range(len(examples) - 2):
        user, reply, result = examples[i], examples[i + 1], examples[i + 2]
        if user.role != "user" or reply.role != "assistant" or result.role != "user":
            continue
        calls = parse_action(reply.content).tool_calls
        if len(calls) != 1:
            continue
        obs = _observation(result)
        request = user.content
        if last is not None and request.strip() and not _is_result(user) and carried(last, calls[0]):
            shots.append((_listing([last, (calls[0], obs)]), request))
        last = (calls[0], obs)
    return shots


CHAIN_ASK = (
    "Write the user's request that these calls solve in order: one request with the values of call [0], in which "
    "each later call uses the result before it without repeating that value."
)


def chain_prompt(calls: Sequence[tuple[ToolCall, str]], shots: Sequence[tuple[str, str]] = ()) -> list[ChatMessage]:
    """One request over a chain of dependent calls (``difficulty.chained``). ``shots``: (listing, request) worked
    examples as chat turns (``chain_shots``)."""
    return _asking(CHAIN_ASK, calls, shots)


def chain_shots(examples: Sequence[ChatMessage]) -> list[tuple[str, str]]:
    """(listing, request) pairs out of an environment's worked examples in which one user request is answered by
    two or more calls, each taking a value from the previous call's result ("Add 5 and 7, then multiply the sum by
    3." for add(5, 7) -> 12, multiply(12, 3))."""
    from evolvekit.env.action_text import parse_action

    shots = []
    for i, user in enumerate(examples):
        if user.role != "user" or _is_result(user) or not user.content.strip():
            continue
        steps: list[tuple[ToolCall, str]] = []
        j = i + 1
        while j + 1 < len(examples) and examples[j].role == "assistant" and _is_result(examples[j + 1]):
            calls = parse_action(examples[j].content).tool_calls
            if len(calls) != 1:
                break
            steps.append((calls[0], _observation(examples[j + 1])))
            j += 2
        if len(steps) >= 2 and all(links(a, b[0]) for a, b in zip(steps, steps[1:])):
            shots.append((_listing(steps), user.content))
    return shots


def request_seeds(examples: Sequence[ChatMessage], tools: dict[str, ToolSchema]) -> list[Seed]:
    """The back-translation writer's bootstrap out of the worked examples every prompt shows: each one-call example
    (request, call, result) whose request the model wrote and passes the text filters (states exactly its values,
    names no identifier): a template fallback ("Add two numbers (1, 2).") is never shown as a request to imitate."""
    from evolvekit.env.action_text import parse_action

    seeds: list[Seed] = []
    for i in range(len(examples) - 2):
        user, reply, result = examples[i], examples[i + 1], examples[i + 2]
        if user.role != "user" or reply.role != "assistant" or _is_result(user) or not _is_result(result):
            continue
        calls = parse_action(reply.content).tool_calls
        if len(calls) != 1:
            continue
        tool = tools.get(calls[0].name)
        template = user.content in (documented_request(tool, calls[0]), unnamed_request(tool, calls[0]))
        if not template and states_exactly(user.content, calls) and not names_identifier(user.content, calls):
            obs = _observation(result).split("] ", 1)[-1]
            seeds.append((calls[0], obs, tool, user.content))
    return seeds


@dataclass
class SynthesisReport:
    tasks: list[Task] = field(default_factory=list)
    calls: int = 0
    unparseable: int = 0
    unchained: int = 0  # chained synthesis: explorations without a chain of dependent calls of that length
    # back-translated requests (questioning.requests.mode: backtranslate): candidates and the text filters' drops
    requests: RequestFunnel = field(default_factory=RequestFunnel)


class TaskSynthesizer:
    def __init__(
        self,
        engine: Engine,
        params: SamplingParams,
        difficulty: DifficultyConfig,
        rubrics: Sequence[str] = (),
        tasks_per_trace: int = 3,
        targeted: bool = False,
        shots: Sequence[tuple[str, str]] = (),
        follow_shots: Sequence[tuple[str, str]] = (),
        chain_shots: Sequence[tuple[str, str]] = (),
        candidates: int = 1,
        agreement: ToolAgreement | None = None,
        numbers_constrained: bool = False,
        writer: tuple[RequestWriter, RequestFilters] | None = None,
        tools: Sequence[ToolSchema] = (),
        shots_examples: Sequence[ChatMessage] = (),
    ) -> None:
        self.engine, self.params, self.difficulty = engine, params, difficulty
        # single-turn targeted synthesis under questioning.requests.mode: backtranslate (questioning/requests.py): the
        # requests are the writer's candidates that pass the text filters, up to its shortlist per window of calls
        self.writer = writer
        self.tools = {t.name: t for t in tools}  # the sandbox's tools: their descriptions shown to the writer
        # the writer's bootstrap: the worked examples' own requests that pass its text filters (request_seeds)
        self.seeds = request_seeds(shots_examples, self.tools) if writer is not None else []
        self.rubrics, self.tasks_per_trace = list(rubrics), tasks_per_trace
        self.targeted, self.shots, self.follow_shots = targeted, list(shots), list(follow_shots)
        self.chain_shots = list(chain_shots)
        self.candidates = candidates  # sampled requests per ask; the one that states most of its values is kept
        self.agreement = agreement  # with several candidates: prefer one that asks for its calls' tools
        # a request's numbers decoded under NumberConstraint (an in-process synthesizer): only its calls' own values
        self.numbers_constrained = numbers_constrained and self.engine.caps.constrained
        self._numbers: NumberVocabulary | None = None
        self._seed = params.seed

    def start_round(self, offset: int) -> None:
        """Seeded sampling: the next synthesis round draws from the role's seed + ``offset``; an unseeded
        synthesizer stays unseeded."""
        self.params = replace(self.params, seed=offset_seed(self._seed, offset))

    def _requests(self, prompts: Sequence[list[ChatMessage]], values: Sequence[Sequence]) -> list[list[str]]:
        """``candidates`` sampled answers per prompt, one line each; with ``numbers_constrained`` every number an
        answer writes is one of its prompt's ``values``."""
        params = replace(self.params, n=self.candidates, stop=tuple(self.params.stop) + ("\n",))
        if not prompts:
            return []
        if not self.numbers_constrained:
            return [[o.text for o in out] for out in self.engine.chat(list(prompts), params)]
        if self._numbers is None:
            self._numbers = NumberVocabulary(*self.engine.vocabulary)
        vocab = self._numbers
        batch = self.engine.constrained(replace(params, n=1))
        keys = [(i, c) for i in range(len(prompts)) for c in range(self.candidates)]
        ids = [self.engine.apply_chat_template(list(p)) for p in prompts]
        constraints: list[Any] = [
            NumberConstraint(vocab, {f for v in values[i] for f in number_strings(v)}) for i, _ in keys
        ]
        batch.add([(k, ids[k[0]]) for k in keys], constraints=constraints)
        done = batch.run()
        return [[done[(i, c)].text for c in range(self.candidates)] for i in range(len(prompts))]

    def _written_items(self, usable, report: SynthesisReport) -> tuple[list[list[tuple[str, list[int]]]], int]:
        """Back-translation (``writer``): per usable trace, its (request, window) items, every shortlisted candidate
        of each window (the round trip, in the pipeline, keeps the window's best); and how many windows kept none.
        A window no candidate survived for falls back to the documented mode's ask (the targeted prompt), counted
        in ``report.requests.fallback``: a sandbox whose values the small model seldom writes exactly (paths, ids)
        still gets tasks, and no window is worse off than in the documented mode."""
        assert self.writer is not None
        writer, filters = self.writer
        asks = self._windows(usable)
        executed = [
            [(usable[k][1][i][0], usable[k][1][i][1], self.tools.get(usable[k][1][i][0].name)) for i in w]
            for k, w in asks
        ]
        items: list[list[tuple[str, list[int]]]] = [[] for _ in usable]
        bare = []
        for (k, w), kept in zip(asks, writer.candidates(executed, filters, report.requests, self.seeds)):
            items[k] += [(c.request, w) for c in kept]
            if not kept:
                bare.append((k, w))
        fallback = self._targeted(usable, bare)
        report.requests.fallback += sum(r is not None for r in fallback)
        for (k, w), request in zip(bare, fallback):
            if request is not None:
                items[k].append((request, w))
        return items, sum(r is None for r in fallback)

    def _windows(self, usable) -> list[tuple[int, list[int]]]:
        """Every (trace, window of its calls) a single-turn request is asked for."""
        return [
            (k, w)
            for k, (_, calls) in enumerate(usable)
            for w in windows(len(calls), self.difficulty.operations, self.tasks_per_trace)
        ]

    def _targeted(self, usable, asks: Sequence[tuple[int, list[int]]]) -> list[str | None]:
        """The documented mode's ask: per (trace, window), the targeted prompt's best request, or None."""
        chosen = [[usable[k][1][i][0] for i in w] for k, w in asks]
        values = [[v for c in cs for v in argument_values(c.arguments)] for cs in chosen]
        answers = self._requests([targeted_prompt([usable[k][1][i] for i in w], self.shots) for k, w in asks], values)
        return [best_request(texts, cs, vs, self.agreement) for cs, vs, texts in zip(chosen, values, answers)]

    def _items(self, usable, report: SynthesisReport) -> tuple[list[list[tuple[str, list[int]]]], int]:
        """Per usable trace, its (request, call indices) items; and how many answers gave none."""
        if self.writer is not None and self.targeted:
            return self._written_items(usable, report)
        if not self.targeted:
            outs = self.engine.chat(
                [synthesis_prompt(calls, self.difficulty, self.rubrics, self.tasks_per_trace) for _, calls in usable],
                self.params,
            )
            parsed = [parse_synthesis(out[0].text, len(calls)) for (_, calls), out in zip(usable, outs)]
            return parsed, sum(1 for it in parsed if not it)
        asks = self._windows(usable)
        items: list[list[tuple[str, list[int]]]] = [[] for _ in usable]
        requests = self._targeted(usable, asks)
        for (k, w), request in zip(asks, requests):
            if request is not None:
                items[k].append((request, w))
        return items, sum(r is None for r in requests)

    def _chained_items(self, usable, report: SynthesisReport) -> list[list[tuple[list[str], list[int]]]]:
        """Multi-turn synthesis: per usable trace, its (turn requests, chain) items (module docstring)."""
        found = [chains(calls, self.difficulty.turns, self.tasks_per_trace) for _, calls in usable]
        report.unchained = sum(1 for c in found if not c)
        asks = []  # (trace, chain number, turn, prompt)
        for k, ((_, calls), cs) in enumerate(zip(usable, found)):
            for n, chain in enumerate(cs):
                asks.append((k, n, 0, targeted_prompt([calls[chain[0]]], self.shots)))
                for t in range(1, len(chain)):
                    asks.append((k, n, t, follow_up_prompt(calls[chain[t - 1]], calls[chain[t]], self.follow_shots)))
        # per ask, the values its request must state (a later turn not what it takes from the previous result)
        owns = [chain_values(usable[k][1], found[k][n])[t] for k, n, t, _ in asks]
        outs = self._requests([a[3] for a in asks], owns)
        requests: dict[tuple[int, int], list[str | None]] = {}
        for (k, n, t, _), own, out in zip(asks, owns, outs):
            calls, chain = usable[k][1], found[k][n]
            requests.setdefault((k, n), [None] * len(chain))[t] = best_request(
                out, [calls[chain[t]][0]], own, self.agreement
            )
        items: list[list[tuple[list[str], list[int]]]] = [[] for _ in usable]
        for (k, n), turns in requests.items():
            if all(r is not None for r in turns):
                items[k].append(([r for r in turns if r is not None], found[k][n]))
            else:
                report.unparseable += 1
        return items

    def _one_request_chains(self, usable, report: SynthesisReport) -> list[list[tuple[str, list[int]]]]:
        """``difficulty.chained``: per usable trace, its (request, chain) items, one request over each chain of
        ``difficulty.operations`` dependent calls (module docstring)."""
        found = [chains(calls, self.difficulty.operations, self.tasks_per_trace) for _, calls in usable]
        report.unchained = sum(1 for c in found if not c)
        asks = [(k, chain) for k, cs in enumerate(found) for chain in cs]
        per_call = [chain_values(usable[k][1], chain) for k, chain in asks]  # per ask, per call
        owns = [[v for vals in own for v in vals] for own in per_call]
        prompts = [chain_prompt([usable[k][1][i] for i in chain], self.chain_shots) for k, chain in asks]
        outs = self._requests(prompts, owns)
        items: list[list[tuple[str, list[int]]]] = [[] for _ in usable]
        for (k, chain), own, order, out in zip(asks, owns, per_call, outs):
            request = best_request(out, [usable[k][1][i][0] for i in chain], own, self.agreement, order)
            if request is None:
                report.unparseable += 1
            else:
                items[k].append((request, chain))
        return items

    def synthesize(
        self, traces: Sequence[ExplorationTrace], env_name: str, metadata: dict | None = None
    ) -> SynthesisReport:
        report = SynthesisReport()
        usable = [(t, distill(t)) for t in traces]
        usable = [(t, calls) for t, calls in usable if calls]
        if not usable:
            return report
        report.calls = len(usable)
        if self.difficulty.chained:
            for (trace, calls), items in zip(usable, self._one_request_chains(usable, report)):
                for request, chain in items:
                    meta = dict(metadata or {})
                    meta.update(
                        {
                            "exploration_id": trace.exploration_id,
                            "explored_steps": chain,
                            # one reference turn: every value the chain takes from a result, not asked of the request
                            "carried_values": [
                                [v for a, b in zip(chain, chain[1:]) for v in carried(calls[a], calls[b][0])]
                            ],
                        }
                    )
                    whole = [[calls[i][0] for i in chain]]  # one reference turn: the whole chain
                    report.tasks.append(self._task(env_name, request, whole, meta, trace.sandbox))
            return report
        if self.difficulty.turns > 1:
            for (trace, calls), chained in zip(usable, self._chained_items(usable, report)):
                for turns, chain in chained:
                    ref = [calls[i][0] for i in chain]
                    meta = dict(metadata or {})
                    meta.update(
                        {
                            "exploration_id": trace.exploration_id,
                            "explored_steps": chain,
                            "carried_values": [[]]  # per turn: the values it takes from the previous result
                            + [carried(calls[a], calls[b][0]) for a, b in zip(chain, chain[1:])],
                        }
                    )
                    report.tasks.append(self._task(env_name, turns, [[c] for c in ref], meta, trace.sandbox))
            return report
        per_trace, report.unparseable = self._items(usable, report)
        for (trace, calls), items in zip(usable, per_trace):
            for query, idx in items:
                ref = [calls[i][0] for i in idx]
                meta = dict(metadata or {})
                meta.update({"exploration_id": trace.exploration_id, "explored_steps": idx})
                report.tasks.append(self._task(env_name, query, [ref], meta, trace.sandbox))
        return report

    @staticmethod
    def _task(
        env_name: str, query: str | list[str], reference: list[list[ToolCall]], meta: dict, sandbox: dict | None = None
    ) -> Task:
        calls = [c for turn in reference for c in turn]
        return Task(
            task_id=new_id("syn"),
            env_name=env_name,
            query=query,
            initial_config=dict((sandbox or {}).get("initial_config") or {}),
            reference_solution=reference,
            source=TaskSource.SYNTHETIC,
            difficulty=Difficulty(
                entities=len({c.name for c in calls}),
                attributes=len({k for c in calls for k in c.arguments}),
                operations=len(calls),
            ),
            metadata=meta,
        )
