"""Curiosity-driven exploration (AgentEvolver §3.1, Eq. 8-9).

The explorer LLM (its own role, high temperature) acts in the environment's *sandbox* (no task) from an initial
state, guided by the environment profile. The first N_b steps are breadth-first: the whole history is in context
and the explorer is asked to try operations it has not used yet. Afterwards it goes depth-first with the myopic
rule: only the last N_d observations stay in context and it is asked to build on them. Many runs advance in lock
step (one batched generation per round); every trajectory is kept.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable, Sequence

from evolvekit.engine.base import ConstrainedDecode, Engine
from evolvekit.env.action_text import CLOSE, format_call, parse_action
from evolvekit.env.base import Environment, EnvProfile
from evolvekit.env.prompts import system_prompt
from evolvekit.errors import EnvError
from evolvekit.llm.base import SamplingParams, offset_seed
from evolvekit.llm.constrain import SchemaConstraint, SchemaVocabulary, TokenTrie
from evolvekit.progress import StageProgress
from evolvekit.types import ChatMessage, ToolCall, new_id

log = logging.getLogger(__name__)

BREADTH_HINT = "Explore broadly: call a tool you have not used yet, with realistic arguments."
DEPTH_HINT = "Explore in depth: build on the most recent results and try a follow-up operation on them."


@dataclass
class ExplorationStep:
    index: int
    action_text: str
    tool_calls: list[ToolCall]
    observation: str
    ok: bool  # every call executed without an error


@dataclass
class ExplorationTrace:
    exploration_id: str
    sandbox: dict
    steps: list[ExplorationStep] = field(default_factory=list)
    error: str | None = None

    def successful_calls(self) -> list[tuple[int, ToolCall, str]]:
        """(step index, call, observation) of every call that executed without an error."""
        return [(s.index, c, s.observation) for s in self.steps if s.ok for c in s.tool_calls]


_WARNED_NO_RESULTS: set[str] = set()


def warn_no_call_results(env, calls: int) -> None:
    """Once per environment class: its step executed ``calls`` calls and returned no ``call_results``, so every
    call counts as failed (nothing explored, no task kept), a plugin's most likely slip (issue 78)."""
    name = type(env).__name__
    if name in _WARNED_NO_RESULTS:
        return
    _WARNED_NO_RESULTS.add(name)
    log.warning(
        "%s.step: %d tool call(s) and no call_results: every call counts as failed, so exploration finds nothing and "
        "no task is kept; return one CallResult per call (evolvekit.env.base.execute_calls does it; "
        'docs/environments.md, "Bring your own environment")',
        name, calls,
    )  # fmt: skip


def schema_problem(tool) -> str | None:
    """Why the explorer cannot use a tool's parameter description, or None: it must be a JSON schema object
    (``{"type": "object", "properties": {...}}``; BFCL's ``"type": "dict"`` too) or empty (no arguments). A flat
    ``{"n": {"type": "integer"}}`` let the explorer write only ``{}`` (issue 78)."""
    p = tool.parameters
    if not p or "properties" in p or p.get("type") in ("object", "dict"):
        return None
    shown = json.dumps(p)[:120]
    return (
        f"tool {tool.name!r}: its parameters {shown} are no JSON schema object; write them as "
        '{"type": "object", "properties": {...}} (docs/environments.md, "Bring your own environment")'
    )


def phase(step_index: int, n_breadth: int) -> str:
    """Eq. 9: breadth-first for the first N_b steps, depth-first after."""
    return "breadth" if step_index < n_breadth else "depth"


def context_window(
    steps: Sequence[ExplorationStep], step_index: int, n_breadth: int, n_depth: int
) -> list[ExplorationStep]:
    """The steps the explorer sees before step ``step_index``: all of them while breadth-first, the last N_d after."""
    if phase(step_index, n_breadth) == "breadth":
        return list(steps)
    return list(steps)[-n_depth:] if n_depth > 0 else []


def untried_tools(tools, steps: Sequence[ExplorationStep]) -> list[str]:
    used = {c.name for s in steps if s.ok for c in s.tool_calls}
    return [t.name for t in tools if t.name not in used]


def profile_text(profiles: Sequence[EnvProfile]) -> str:
    parts = []
    for p in profiles:
        parts.append(f"Environment: {p.name}: {p.description}")
        for e in p.entities:
            parts.append(f"- entity {e.name}: {e.description}; attributes: {', '.join(e.attributes[:20])}")
    return "\n".join(parts)


def breadth_tool(untried: Sequence[str], step_index: int, n_breadth: int, run: int) -> str:
    """The untried tool a breadth step names: parallel runs start ``n_breadth`` apart, so together they cover
    different tools instead of all naming the same first ones."""
    return untried[(run * n_breadth + step_index) % len(untried)]


def step_hint(tools, steps: Sequence[ExplorationStep], step_index: int, n_breadth: int, run: int = 0) -> str:
    """The instruction shown before step ``step_index``, given the steps before it (Eq. 9's phase)."""
    if phase(step_index, n_breadth) == "depth":
        return DEPTH_HINT
    untried = untried_tools(tools, steps[:step_index])
    # curiosity made concrete: name one operation not yet used (small models need the nudge)
    return BREADTH_HINT + (" Try `" + breadth_tool(untried, step_index, n_breadth, run) + "`." if untried else "")


def explorer_messages(
    tools,
    profiles: Sequence[EnvProfile],
    steps: Sequence[ExplorationStep],
    step_index: int,
    n_breadth: int,
    n_depth: int,
    rendering: str = "compact",
    examples: Sequence[ChatMessage] = (),
    goal: str | None = None,
    run: int = 0,
    start: str = "",
) -> list[ChatMessage]:
    """The explorer's context before step ``step_index``; ``start``: the sandbox's own first observation (what its
    initial state holds, such as the files in the current directory), shown in the first message.

    Every message is rendered as it was first shown (each hint is the one of the step it preceded), so while the
    window keeps all steps the context of step t is an exact prefix of the context of step t+1 and a kept KV cache
    prefills only the newest observation and hint.
    """
    steps = list(steps)[:step_index]
    visible = context_window(steps, step_index, n_breadth, n_depth)
    first = step_index - len(visible)  # index of the first visible step
    msgs = [
        ChatMessage(role="system", content=system_prompt(tools, rendering) + "\n\n" + profile_text(profiles)),
        *examples,
        ChatMessage(
            role="user",
            content="You are exploring this environment to learn what it can do. "
            + (start.strip() + "\n" if start.strip() else "")
            + (goal + "\n" if goal else "")
            + step_hint(tools, steps, first, n_breadth, run),
        ),
    ]
    for j, s in enumerate(visible, start=first):
        msgs.append(ChatMessage(role="assistant", content=s.action_text))
        msgs.append(
            ChatMessage(
                role="user",
                content=f"Tool results:\n{s.observation}\n\n" + step_hint(tools, steps, j + 1, n_breadth, run),
            )
        )
    return msgs


OPEN_NAME = '<tool_call>{"name": "'  # the depth-step prefix: the explorer chooses the tool (among the real ones)
OPEN_ARGS = '", "arguments":'  # after the tool's name: its arguments object follows, decoded under its schema


def call_prefix(tools, steps: Sequence[ExplorationStep], step_index: int, n_breadth: int, run: int = 0) -> str:
    """Scaffold: the explorer's reply starts as an opened tool call. Breadth steps name an untried tool (the
    arguments that follow are decoded under its schema); depth steps leave the tool to the model."""
    if phase(step_index, n_breadth) == "breadth":
        untried = untried_tools(tools, steps)
        if untried:
            return OPEN_NAME + opened_call(
                next(t for t in tools if t.name == breadth_tool(untried, step_index, n_breadth, run))
            )
    return OPEN_NAME


def opened_call(tool) -> str:
    """A tool call opened after ``OPEN_NAME``: the name, up to its arguments object."""
    return tool.name + OPEN_ARGS


class Explorer:
    def __init__(
        self,
        engine: Engine,
        params: SamplingParams,
        n_breadth: int = 3,
        n_depth: int = 27,
        rendering: str = "compact",
        scaffold: bool = False,
        show_start: bool = True,
    ) -> None:
        self.engine, self.n_breadth, self.n_depth, self.rendering = engine, n_breadth, n_depth, rendering
        self.show_start = show_start  # the sandbox's first observation (its initial state) in the first message
        # the call-prefix scaffold needs a backend that continues a given reply start (the local one)
        self.scaffold = scaffold and self.engine.caps.constrained
        self._tries: dict[tuple[str, ...], TokenTrie] = {}  # per tool set: its opened calls as a trie
        self._vocab: SchemaVocabulary | None = None  # built on first use (about a second for a 49k vocabulary)
        self._close: TokenTrie | None = None
        self.params = SamplingParams(
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            max_new_tokens=params.max_new_tokens,
            stop=tuple(params.stop) + (CLOSE,),
            seed=params.seed,
            stop_on_balanced_json=True,
        )
        self._seed = params.seed

    def start_round(self, offset: int) -> None:
        """Seeded sampling: the next exploration round draws from the role's seed + ``offset`` (a round's own
        samples); an unseeded explorer stays unseeded."""
        self.params = replace(self.params, seed=offset_seed(self._seed, offset))

    def _arguments(self, tool):
        """Scaffold: the tool's arguments object decoded under its parameter schema (argument names, required
        ones, value types), then the call's closing brace. None (free decoding) if the schema cannot be used."""
        if self._vocab is None:
            self._vocab = SchemaVocabulary(*self.engine.vocabulary)
            self._close = TokenTrie.build([self.engine.encode("}")])  # the call's own closing brace
        close = self._close
        params = dict(getattr(tool, "parameters", None) or {})
        params.setdefault("type", "object")  # a tool's parameters are always an object, with only its arguments
        params.setdefault("properties", {})
        try:
            return SchemaConstraint(self._vocab, params, then=lambda: close)
        except Exception as err:  # an unusual schema: this call's arguments are decoded freely
            log.debug("no schema constraint for %s: %s", tool.name, err)
            return None

    def _call_trie(self, tools) -> TokenTrie:
        """Scaffold: the real tools' opened calls as a decoding constraint, each followed by its arguments under
        its schema, so that where the explorer chooses the tool it chooses a real one, with its own probabilities
        among the real names, and calls it with arguments the tool accepts (a 135M model at T = 1 on BFCL's
        30-tool sandboxes otherwise invents names such as `rm_dport`, writes `{"username": 1a}`, or makes up
        argument names)."""
        key = tuple(sorted(t.name for t in tools))
        if key not in self._tries:
            ordered = sorted(tools, key=lambda t: t.name)
            thens: list[Callable[[], Any] | None] = [partial(self._arguments, t) for t in ordered]
            self._tries[key] = TokenTrie.build([self.engine.encode(opened_call(t)) for t in ordered], thens=thens)
        return self._tries[key]

    def _constraint(self, prefix: str, tools):
        """The decoding constraint of a reply that starts with ``prefix``: the tool choice (depth steps) or the
        named tool's arguments (breadth steps)."""
        if not tools:
            return None
        if prefix == OPEN_NAME:
            return self._call_trie(tools)
        name = prefix[len(OPEN_NAME) : -len(OPEN_ARGS)]
        tool = next((t for t in tools if t.name == name), None)
        return self._arguments(tool) if tool is not None else None

    def _generate(
        self,
        convs: list[list[ChatMessage]],
        prefixes: list[str],
        step: int,
        keys: list[int],
        batch: ConstrainedDecode | None = None,
        tools=None,
    ) -> list[str]:
        params = replace(self.params, seed=offset_seed(self.params.seed, step))
        if not self.scaffold:
            return [o[0].text for o in self.engine.chat(convs, params)]
        # one decode batch per exploration (keep_rows): a run's next step prefills only what is new in its context
        assert batch is not None  # explore() opens it when scaffolding
        batch.use(params)
        constraints = [self._constraint(x, ts) for x, ts in zip(prefixes, tools or [None] * len(keys))]
        eng = self.engine
        batch.add(
            [(k, eng.apply_chat_template(c) + eng.encode(x)) for k, c, x in zip(keys, convs, prefixes)],
            text_prefixes=prefixes,
            constraints=constraints,
        )
        done = batch.run()
        return [x + done[k].text for k, x in zip(keys, prefixes)]

    def explore(
        self, make_env: Callable[[], Environment], sandbox: dict, runs: int, max_steps: int, goal: str | None = None
    ) -> list[ExplorationTrace]:
        """``runs`` exploration runs of ``max_steps`` steps (``goal``: a CoEvolve signal-conditioned context)."""
        envs: list[Environment | None] = []
        traces: list[ExplorationTrace] = []
        tools: list[list] = []
        examples: list[list] = []
        starts: list[str] = []  # each run's first observation (the sandbox's initial state)
        for _ in range(runs):
            env = make_env()
            trace = ExplorationTrace(exploration_id=new_id("explore"), sandbox=dict(sandbox))
            try:
                reset = env.reset(None, sandbox)
                envs.append(env)
                tools.append(reset.tools)
                examples.append(reset.examples)
                starts.append(reset.observation if self.show_start else "")
                traces.append(trace)
            except Exception as err:
                trace.error = f"reset: {err}"
                traces.append(trace)
                envs.append(None)
                tools.append([])
                examples.append([])
                starts.append("")
        if envs and all(e is None for e in envs):  # no exploration can run: one line, not empty rounds (issue 54)
            raise EnvError(f"exploration: none of the {runs} episodes started; the first error: {traces[0].error}")
        # every run resets the same environment: the first started run's tools are every run's
        first_tools = next((ts for e, ts in zip(envs, tools) if e is not None), [])
        problems = [p for t in first_tools if (p := schema_problem(t))]
        if problems:
            for e in envs:
                if e is not None:
                    e.close()
            raise EnvError(f"exploration: {problems[0]}")
        profiles = envs[0].profile() if envs and envs[0] is not None else []
        classes = set(sandbox.get("classes") or [])
        profiles = [p for p in profiles if not classes or p.name in classes]
        live = [i for i, e in enumerate(envs) if e is not None]
        batch = self.engine.constrained(self.params, keep_rows=True) if self.scaffold else None
        with StageProgress(f"exploration ({len(live)} runs)", max_steps, logger=log) as progress:
            for step in range(max_steps):
                if not live:
                    break
                convs = [
                    explorer_messages(
                        tools[i],
                        profiles,
                        traces[i].steps,
                        step,
                        self.n_breadth,
                        self.n_depth,
                        self.rendering,
                        examples[i],
                        goal,
                        run=i,
                        start=starts[i],
                    )
                    for i in live
                ]
                prefixes = [call_prefix(tools[i], traces[i].steps, step, self.n_breadth, run=i) for i in live]
                outs = self._generate(convs, prefixes, step, live, batch, [tools[i] for i in live])
                still = []
                for i, text in zip(live, outs):
                    if OPEN_TAG in text and CLOSE not in text:
                        text += CLOSE
                    action = parse_action(text)
                    if not action.tool_calls:
                        # exploration is about calling tools: a message without a call is recorded and the run goes on
                        traces[i].steps.append(
                            ExplorationStep(step, text, [], action.parse_error or "(no tool call)", False)
                        )
                        still.append(i)
                        continue
                    live_env = envs[i]
                    assert live_env is not None  # only live runs step
                    try:
                        res = live_env.step(action)
                    except Exception as err:
                        traces[i].error = f"step: {err}"
                        continue
                    if not res.call_results:
                        warn_no_call_results(live_env, len(action.tool_calls))
                    ok = bool(res.call_results) and all(r.ok for r in res.call_results)
                    traces[i].steps.append(
                        ExplorationStep(
                            step,
                            "".join(format_call(c) for c in action.tool_calls),
                            action.tool_calls,
                            res.observation,
                            ok,
                        )
                    )
                    if not res.done:
                        still.append(i)
                live = still
                progress.advance()
        for e in envs:
            if e is not None:
                e.close()
        return traces


OPEN_TAG = "<tool_call>"
