"""Worked examples the run makes itself (``env.worked_examples: self``, the default).

A small policy needs worked examples as chat turns to call tools at all (FACTS.md: none, 0% parse; three, 56-86%).
A person's worked examples are person-written task instances ("What is 12 plus 30?" → ``add(12, 30)``), and a
synthesizer shown them copies their wording, so they stay behind ``env.worked_examples: person``. By default the
run writes its own, before anything else, from what only the environment and the run itself provide:

- the calls: a short exploration of the sandbox by the explorer (with its decoding scaffold, no example shown),
  keeping the first successful call of each tool, from distinct tools;
- the result: each call replayed on a fresh sandbox, its real output;
- the request: written from the tool's own documentation, its schema description, with the call's arguments
  (``documented_request``: "Add two numbers (a = 12, b = 30)."); the closing message states the output.

The same examples then reach every prompt of the run: the explorer's and the synthesizer's during synthesis, the
policy's in training and in held-out evaluation (before and after alike).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Callable, Sequence, cast

from evolvekit.engine.registry import seam
from evolvekit.env.action_text import format_call
from evolvekit.env.base import Action, Environment, ToolSchema
from evolvekit.env.bfcl.families import Demonstration
from evolvekit.errors import EnvError
from evolvekit.llm.base import LLM
from evolvekit.questioning.explore import ExplorationTrace, Explorer
from evolvekit.types import ChatMessage, ToolCall

log = logging.getLogger(__name__)

# the exploration that makes the examples: a few runs of a few breadth-first steps (each step names an untried tool)
EXAMPLE_RUNS = 2
EXAMPLE_STEPS = 4


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


def make_self_examples(
    explorer: Explorer, make_env: Callable[[], Environment], sandbox: dict, count: int
) -> list[Demonstration]:
    """Up to ``count`` worked examples from the explorer's own executed calls (``make_env`` shows no example)."""
    try:
        env = make_env()
        try:
            tools = {t.name: t for t in env.reset(None, sandbox).tools}
        finally:
            env.close()
        if not tools:  # a text-action environment (ScienceWorld): an example is a tool call, there is none to make
            log.info("self-made worked examples: none (the environment offers no tool; actions are text)")
            return []
        traces = explorer.explore(make_env, sandbox, EXAMPLE_RUNS, max(EXAMPLE_STEPS, count))
    except EnvError as err:  # an environment the explorer cannot explore: no example, said once
        log.warning("self-made worked examples: none (the sandbox could not be explored: %s)", str(err)[:300])
        return []
    out = []
    for call in first_calls(traces, count):
        output = replayed(call, make_env, sandbox)
        if output is not None:
            out.append(
                Demonstration(documented_request(tools.get(call.name), call), call, output, closing_message(output))
            )
    if not out:
        log.warning(
            "self-made worked examples: the exploration executed no call (%d runs of %d steps); prompts show none",
            EXAMPLE_RUNS,
            max(EXAMPLE_STEPS, count),
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


def run_examples(cfg, explorer_llm, make_env: Callable[[], Environment]) -> list[Demonstration]:
    """The run's own worked examples for ``cfg`` (``env.worked_examples: self``): the explorer (``examples_explorer``)
    explores the sandbox the synthesis uses; ``make_env`` shows no example."""
    from evolvekit.questioning.pipeline import sandbox_for

    explorer = examples_explorer(cfg, explorer_llm)
    return make_self_examples(explorer, make_env, sandbox_for(cfg.env), cfg.env.self_examples)


# the examples' exploration seed: apart from the synthesis's (run.seed, + 1000 per exploration) and CoEvolve's (+500)
EXAMPLES_SEED = 777


def with_run_examples(
    cfg, explorer: Callable[[], LLM], make_env: Callable[[], Environment], shown: Callable[[], list] | None = None
) -> Callable[[], Environment]:
    """``make_env`` as the commands outside a run use it (``tasks synthesize``, ``eval``): under
    ``env.worked_examples: self`` its environments show the examples ``run_examples`` makes on the first reset (the
    same ones a run with this config and seed makes when its explorer is the base model; ``explorer()`` is called
    only then, so nothing is loaded or explored when no environment resets); otherwise ``make_env`` itself
    (``make_env`` shows a person's examples only under ``person``). ``shown``: examples already made for this
    config (``examples_once``), to share between evaluations."""
    if cfg.env.worked_examples != "self":
        return make_env
    from evolvekit.env.examples import ShownExamples

    once = shown if shown is not None else examples_once(cfg, explorer, make_env)
    return lambda: cast(Environment, ShownExamples(make_env(), once))


def examples_once(cfg, explorer: Callable[[], LLM], make_env: Callable[[], Environment]) -> Callable[[], list]:
    """The chat turns of the run's own worked examples for ``cfg``, made the first time they are asked for."""
    from evolvekit.env.examples import Once

    return Once(lambda: example_messages(run_examples(cfg, explorer(), make_env)))
