"""Worked examples the run makes itself (``env.worked_examples: self``, the default).

A small policy needs worked examples as chat turns to call tools at all (FACTS.md: none, 0% parse; three, 56-86%).
A person's worked examples are person-written task instances ("What is 12 plus 30?" → ``add(12, 30)``), and a
synthesizer shown them copies their wording, so they stay behind ``env.worked_examples: person``. By default the
run writes its own, before anything else, from what only the environment and the run itself provide:

- the calls: a short exploration of the sandbox by the explorer (with its decoding scaffold, no example shown),
  keeping the first successful call of each tool, from distinct tools;
- the result: each call replayed on a fresh sandbox, its real output;
- the request: written by the run's own model for each executed call and filtered hard
  (``questioning.requests.mode: backtranslate``, questioning/requests.py): many candidates under several framings,
  kept only if they state exactly the call's values, name no identifier, are no near-duplicate, and round-trip (the
  policy, shown the request and the other tools' examples, reaches the same result); the best by round-trip pass
  rate. A call no candidate survives for gets the template written from the tool's own documentation with its
  values and no parameter name (``unnamed_request``: "Add two numbers (12, 30)."), counted in the funnel as
  ``fallback``; ``mode: documented`` gives every call the earlier template with the names (``documented_request``:
  "Add two numbers (a = 12, b = 30)."). The closing message states the output.

Every tool the exploration executed gets an example (up to ``env.self_examples``).

The same examples then reach every prompt of the run: the explorer's and the synthesizer's during synthesis, the
policy's in training and in held-out evaluation (before and after alike).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence, cast

from evolvekit.engine.registry import seam
from evolvekit.env.action_text import format_call
from evolvekit.env.base import Action, Environment, ToolSchema
from evolvekit.env.bfcl.families import Demonstration
from evolvekit.env.examples import ShownExamples
from evolvekit.errors import EnvError
from evolvekit.llm.base import LLM
from evolvekit.questioning.explore import ExplorationTrace, Explorer
from evolvekit.questioning.requests import (  # noqa: F401 - documented_request: the templates' home, re-exported
    RequestFilters,
    RequestFunnel,
    RequestWriter,
    RoundTrip,
    documented_request,
    pass_rate,
    ranked,
    unnamed_request,
)
from evolvekit.types import ChatMessage, Task, ToolCall

log = logging.getLogger(__name__)

# the exploration that makes the examples: a few runs of a few breadth-first steps (each step names an untried tool)
EXAMPLE_RUNS = 2
EXAMPLE_STEPS = 4


def closing_message(output: str) -> str:
    """The example's closing answer: the call's output, its one value where the output is a one-field object."""
    try:
        value = json.loads(output)
    except ValueError:
        value = output
    if isinstance(value, dict) and len(value) == 1:
        value = next(iter(value.values()))
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return f"The result is {text[:200]}."


def first_calls(traces: Sequence[ExplorationTrace], count: int) -> list[ToolCall]:
    """The first successful call of each tool, in exploration order (step by step across the runs), from at most
    ``count`` distinct tools."""
    seen: dict[str, ToolCall] = {}
    per_run = [t.successful_calls() for t in traces]
    longest = max((len(calls) for calls in per_run), default=0)
    for i in range(longest):
        for calls in per_run:
            if i < len(calls) and calls[i][1].name not in seen and len(seen) < count:
                seen[calls[i][1].name] = calls[i][1]
    return list(seen.values())


def replayed(call: ToolCall, make_env: Callable[[], Environment], sandbox: dict) -> str | None:
    """The call's output on a fresh sandbox, or None where it does not execute there."""
    env = make_env()
    try:
        env.reset(None, sandbox)
        result = env.step(Action(tool_calls=[call]))
    except Exception as err:  # an environment's own failure: this call makes no example
        log.info("self-made example: %s did not replay (%s)", format_call(call), str(err)[:200])
        return None
    finally:
        env.close()
    if not result.call_results or not result.call_results[0].ok:
        return None
    return result.call_results[0].output


@dataclass
class ExampleRequests:
    """What writes the examples' requests under ``questioning.requests.mode: backtranslate``: the writer, the filters,
    the round trip (None: that filter off) and the funnel it fills."""

    writer: RequestWriter
    filters: RequestFilters
    round_trip: RoundTrip | None
    env_name: str
    funnel: RequestFunnel = field(default_factory=RequestFunnel)


def candidate_task(env_name: str, request: str, calls: Sequence[ToolCall], sandbox: dict) -> Task:
    """A round trip's task: the candidate request, its executed calls as the reference (one turn), in the sandbox."""
    from evolvekit.questioning.pipeline import synthetic_metadata
    from evolvekit.questioning.synthesize import TaskSynthesizer

    task = TaskSynthesizer._task(env_name, request, [list(calls)], synthetic_metadata(sandbox), sandbox)
    task.metadata["bfcl_id"] = task.task_id
    return task


class _PerTaskExamples(ShownExamples):
    """An environment whose reset shows the examples kept for its task (the round trip's leave-one-out)."""

    def __init__(self, inner, by_task: dict[str, list[ChatMessage]]) -> None:
        super().__init__(inner, list)
        object.__setattr__(self, "_by_task", by_task)

    def reset(self, task=None, sandbox_config=None):
        result = object.__getattribute__(self, "_inner").reset(task, sandbox_config)
        shown = object.__getattribute__(self, "_by_task").get(task.task_id if task is not None else "", [])
        return result.model_copy(update={"examples": list(shown)})


def written_requests(
    executed: Sequence[tuple[ToolCall, str, ToolSchema | None]],
    requests: ExampleRequests,
    make_env: Callable[[], Environment],
    sandbox: dict,
) -> list[str]:
    """Per executed call, its request: the best back-translated candidate, else the documented template (counted).

    The round trip is leave-one-out: a candidate for call i is attempted by the policy shown the examples of the
    other calls (each with its first candidate that passed the text filters), never one for call i itself."""
    f, funnel = requests.filters, requests.funnel
    shortlists = requests.writer.candidates([[e] for e in executed], f, funnel)
    if f.round_trip and requests.round_trip is not None and any(shortlists):
        provisional = [
            Demonstration(sl[0].request if sl else documented_request(tool, call), call, out, closing_message(out))
            for sl, (call, out, tool) in zip(shortlists, executed)
        ]
        tasks, by_task, owner = [], {}, []
        for i, sl in enumerate(shortlists):
            shown = example_messages([d for j, d in enumerate(provisional) if j != i])
            for c in sl:
                task = candidate_task(requests.env_name, c.request, [executed[i][0]], sandbox)
                tasks.append(task)
                by_task[task.task_id] = shown
                owner.append(c)
        rewards = requests.round_trip(tasks, lambda: _PerTaskExamples(make_env(), by_task))
        for c, r in zip(owner, rewards, strict=True):
            c.rewards, c.pass_rate = list(r), pass_rate(r)
    out = []
    for sl, (call, _, tool) in zip(shortlists, executed):
        best = ranked(sl, f if requests.round_trip is not None else replace(f, round_trip=False), funnel)
        funnel.kept += len(best)
        if best:
            out.append(best[0].request)
        else:
            funnel.fallback += 1
            out.append(unnamed_request(tool, call))
    log.info("self-made worked examples' requests: %s", funnel.line())
    return out


def make_self_examples(
    explorer: Explorer,
    make_env: Callable[[], Environment],
    sandbox: dict,
    count: int,
    requests: ExampleRequests | None = None,
) -> list[Demonstration]:
    """Up to ``count`` worked examples from the explorer's own executed calls, one for every tool it executed
    (``make_env`` shows no example). ``requests``: write their requests by back-translation (module docstring);
    None: the documented template."""
    try:
        env = make_env()
        try:
            tools = {t.name: t for t in env.reset(None, sandbox).tools}
        finally:
            env.close()
        if not tools:  # a text-action environment (ScienceWorld): an example is a tool call, there is none to make
            log.info("self-made worked examples: none (the environment offers no tool; actions are text)")
            return []
        # breadth-first steps name an untried tool each: enough steps to try every tool, up to ``count``
        steps = max(EXAMPLE_STEPS, min(count, len(tools)))
        traces = explorer.explore(make_env, sandbox, EXAMPLE_RUNS, steps)
    except EnvError as err:  # an environment the explorer cannot explore: no example, said once
        log.warning("self-made worked examples: none (the sandbox could not be explored: %s)", str(err)[:300])
        return []
    executed = []
    for call in first_calls(traces, count):
        output = replayed(call, make_env, sandbox)
        if output is not None:
            executed.append((call, output, tools.get(call.name)))
    if requests is None or not executed:
        asked = [documented_request(tool, call) for call, _, tool in executed]
    else:
        asked = written_requests(executed, requests, make_env, sandbox)
    out = [
        Demonstration(request, call, output, closing_message(output))
        for request, (call, output, _) in zip(asked, executed)
    ]
    if not out:
        log.warning(
            "self-made worked examples: the exploration executed no call (%d runs of %d steps); prompts show none",
            EXAMPLE_RUNS,
            steps,
        )
    else:
        log.info("self-made worked examples: %s", "; ".join(f"{d.request!r} -> {format_call(d.call)}" for d in out))
    return out


def example_messages(demos: Sequence[Demonstration]) -> list[ChatMessage]:
    """The examples as the chat turns every prompt shows."""
    return [m for d in demos for m in d.messages(format_call)]


def demos_to_json(demos: Sequence[Demonstration]) -> str:
    return json.dumps(
        [
            {"request": d.request, "call": d.call.model_dump(mode="json"), "result": d.result, "final": d.final}
            for d in demos
        ]
    )


def demos_from_json(text: str) -> list[Demonstration]:
    return [
        Demonstration(str(d["request"]), ToolCall.model_validate(d["call"]), str(d["result"]), str(d["final"]))
        for d in json.loads(text)
    ]


def examples_explorer(cfg, explorer_llm) -> Explorer:
    """The explorer the run's own worked examples come from: ``models.explorer``'s sampling seeded by ``run.seed``,
    the questioning section's breadth, depth, scaffold and start state."""
    from evolvekit.llm.factory import sampling_for
    from evolvekit.questioning.pipeline import scaffold_on

    q = cfg.questioning
    return Explorer(
        seam(explorer_llm),
        sampling_for(cfg.models.explorer, seed=cfg.run.seed + EXAMPLES_SEED),
        q.n_breadth,
        q.n_depth,
        cfg.env.tool_rendering,
        scaffold=scaffold_on(q.scaffold, explorer_llm),
        show_start=q.explore_state,
    )


def example_requests(cfg, explorer_llm) -> ExampleRequests | None:
    """How the run's own examples get their requests (``questioning.requests``): None for the documented template;
    else the explorer's model writes the candidates (at the synthesizer's sampling settings, seeded apart from the
    exploration) and the policy's round trip goes through an engine over the same model: the examples are made
    before training, so that model is the initial policy wherever the explorer is the policy."""
    from evolvekit.agent.parts import round_trip
    from evolvekit.llm.factory import sampling_for

    r = cfg.questioning.requests
    if r.mode == "documented":
        return None
    engine = seam(explorer_llm)
    writer = RequestWriter(
        engine, sampling_for(cfg.models.synthesizer, seed=cfg.run.seed + EXAMPLES_SEED + 1), r.per_framing
    )
    filters = RequestFilters(r.values, r.identifiers, 0.8 if r.dedup else 2.0, r.round_trip_samples > 0, r.shortlist)
    return ExampleRequests(writer, filters, round_trip(cfg, engine), cfg.env.name)


def run_examples(
    cfg, explorer_llm, make_env: Callable[[], Environment], funnel: RequestFunnel | None = None
) -> list[Demonstration]:
    """The run's own worked examples for ``cfg`` (``env.worked_examples: self``): the explorer (``examples_explorer``)
    explores the sandbox the synthesis uses; ``make_env`` shows no example. ``funnel``: the requests' funnel is added
    to it (what the run stores and ``tasks synthesize`` prints)."""
    from evolvekit.questioning.pipeline import sandbox_for

    explorer = examples_explorer(cfg, explorer_llm)
    requests = example_requests(cfg, explorer_llm)
    demos = make_self_examples(explorer, make_env, sandbox_for(cfg.env), cfg.env.self_examples, requests)
    if requests is not None and funnel is not None:
        funnel.add(requests.funnel)
    return demos


# the examples' exploration seed: apart from the synthesis's (run.seed, + 1000 per exploration) and CoEvolve's (+500)
EXAMPLES_SEED = 777


def with_run_examples(
    cfg,
    explorer: Callable[[], LLM],
    make_env: Callable[[], Environment],
    shown: Callable[[], list] | None = None,
    funnel: RequestFunnel | None = None,
) -> Callable[[], Environment]:
    """``make_env`` as the commands outside a run use it (``tasks synthesize``, ``eval``): under
    ``env.worked_examples: self`` its environments show the examples ``run_examples`` makes on the first reset (the
    same ones a run with this config and seed makes when its explorer is the base model; ``explorer()`` is called
    only then, so nothing is loaded or explored when no environment resets); otherwise ``make_env`` itself
    (``make_env`` shows a person's examples only under ``person``). ``shown``: examples already made for this
    config (``examples_once``), to share between evaluations. ``funnel``: their requests' funnel is added to it."""
    if cfg.env.worked_examples != "self":
        return make_env
    once = shown if shown is not None else examples_once(cfg, explorer, make_env, funnel)
    return lambda: cast(Environment, ShownExamples(make_env(), once))


def examples_once(
    cfg, explorer: Callable[[], LLM], make_env: Callable[[], Environment], funnel: RequestFunnel | None = None
) -> Callable[[], list]:
    """The chat turns of the run's own worked examples for ``cfg``, made the first time they are asked for."""
    from evolvekit.env.examples import Once

    return Once(lambda: example_messages(run_examples(cfg, explorer(), make_env, funnel=funnel)))
