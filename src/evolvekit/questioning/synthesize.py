"""Adaptive task synthesis with reference-solution extraction (AgentEvolver §3.2, Eq. 10).

The exploration trajectory is distilled to its successfully executed calls with their results (numbered). The
synthesizer gets them with the user's preferences — difficulty as the number of entities, attributes and
operations a task should involve, plus free-text style rubrics — and writes tasks, each naming the numbered
calls that solve it. The reference solution is exactly those explored calls (never text the model invents), so
every reference is an action that really executed in the sandbox.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Sequence

from evolvekit.agent.parser import format_call
from evolvekit.config import DifficultyConfig
from evolvekit.llm.base import LLM, SamplingParams
from evolvekit.questioning.explore import ExplorationTrace
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
    listing = "\n".join(f"[{i}] {format_call(c)} -> {obs}" for i, (c, obs) in enumerate(calls))
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
    msgs = [ChatMessage(role="system", content=SYNTH_SYSTEM)]
    for listing, request in shots:
        msgs += [
            ChatMessage(role="user", content=f"Executed calls:\n{listing}\n\n{TARGETED_ASK}"),
            ChatMessage(role="assistant", content=request),
        ]
    listing = "\n".join(f"[{i}] {format_call(c)} -> {obs}" for i, (c, obs) in enumerate(calls))
    return msgs + [ChatMessage(role="user", content=f"Executed calls:\n{listing}\n\n{TARGETED_ASK}")]


def parse_request(text: str) -> str | None:
    """The request of a targeted-synthesis answer: its first line, without a 'Task:' label or quotes."""
    line = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
    line = re.sub(r"^(task|request|user)\s*[:：]\s*", "", re.sub(r"[*_#`]", "", line), flags=re.IGNORECASE).strip(
        " \"'"
    )
    if len(line) < 8 or len(line) > 400 or "<tool" in line or line.startswith("{"):
        return None
    return line


def windows(n_calls: int, size: int, count: int) -> list[list[int]]:
    """Up to ``count`` distinct windows of ``size`` consecutive call indices, spread over the exploration."""
    size = max(1, min(size, n_calls))
    starts = sorted({round(i * (n_calls - size) / max(count - 1, 1)) for i in range(count)}) if n_calls > size else [0]
    return [list(range(st, st + size)) for st in starts][:count]


def shots_from_examples(examples: Sequence[ChatMessage]) -> list[tuple[str, str]]:
    """(call listing, request) pairs out of an environment's worked examples (user turn, call, tool result).

    Only self-contained requests become shots: one that leaves a value of its calls unstated ("Multiply that by
    3." for multiply(12, 3), a later turn of a multi-turn example) is what the synthesizer is asked not to write,
    and copying it made half the requests a 135M synthesizer wrote refer to a result that a single-turn task does
    not have (benchmarks/results/synthetic_task_audit.md)."""
    from evolvekit.agent.parser import parse_action
    from evolvekit.questioning.curate import grounding

    shots = []
    for i in range(len(examples) - 2):
        user, call, result = examples[i], examples[i + 1], examples[i + 2]
        if user.role != "user" or call.role != "assistant":
            continue
        calls = parse_action(call.content or "").tool_calls
        if calls and grounding(Task(env_name="", query=user.content or "", reference_solution=[calls])) >= 1.0:
            obs = (result.content or "").replace("Tool results:\n", "").strip()[:300]
            shots.append(
                ("\n".join(f"[{j}] {format_call(c)} -> {obs}" for j, c in enumerate(calls)), user.content or "")
            )
    return shots


@dataclass
class SynthesisReport:
    tasks: list[Task] = field(default_factory=list)
    calls: int = 0
    unparseable: int = 0


class TaskSynthesizer:
    def __init__(
        self,
        llm: LLM,
        params: SamplingParams,
        difficulty: DifficultyConfig,
        rubrics: Sequence[str] = (),
        tasks_per_trace: int = 3,
        targeted: bool = False,
        shots: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.llm, self.params, self.difficulty = llm, params, difficulty
        self.rubrics, self.tasks_per_trace = list(rubrics), tasks_per_trace
        self.targeted, self.shots = targeted, list(shots)

    def _items(self, usable) -> tuple[list[list[tuple[str, list[int]]]], int]:
        """Per usable trace, its (request, call indices) items; and how many answers gave none."""
        if not self.targeted:
            outs = self.llm.chat(
                [synthesis_prompt(calls, self.difficulty, self.rubrics, self.tasks_per_trace) for _, calls in usable],
                self.params,
            )
            parsed = [parse_synthesis(out[0].text, len(calls)) for (_, calls), out in zip(usable, outs)]
            return parsed, sum(1 for it in parsed if not it)
        asks = [
            (k, w)
            for k, (_, calls) in enumerate(usable)
            for w in windows(len(calls), self.difficulty.operations, self.tasks_per_trace)
        ]
        outs = self.llm.chat(
            [targeted_prompt([usable[k][1][i] for i in w], self.shots) for k, w in asks],
            replace(self.params, stop=tuple(self.params.stop) + ("\n",)),
        )
        items: list[list[tuple[str, list[int]]]] = [[] for _ in usable]
        bad = 0
        for (k, w), out in zip(asks, outs):
            request = parse_request(out[0].text)
            if request is None:
                bad += 1
            else:
                items[k].append((request, w))
        return items, bad

    def synthesize(
        self, traces: Sequence[ExplorationTrace], env_name: str, metadata: dict | None = None
    ) -> SynthesisReport:
        report = SynthesisReport()
        usable = [(t, distill(t)) for t in traces]
        usable = [(t, calls) for t, calls in usable if calls]
        if not usable:
            return report
        per_trace, report.unparseable = self._items(usable)
        report.calls = len(usable)
        for (trace, calls), items in zip(usable, per_trace):
            for query, idx in items:
                ref = [calls[i][0] for i in idx]
                n_ops = len(ref)
                n_attrs = len({k for c in ref for k in c.arguments})
                meta = dict(metadata or {})
                meta.update({"exploration_id": trace.exploration_id, "explored_steps": idx})
                report.tasks.append(
                    Task(
                        task_id=new_id("syn"),
                        env_name=env_name,
                        query=query,
                        initial_config=dict(trace.sandbox.get("initial_config") or {}),
                        reference_solution=[ref],
                        source=TaskSource.SYNTHETIC,
                        difficulty=Difficulty(
                            entities=len({c.name for c in ref}), attributes=n_attrs, operations=n_ops
                        ),
                        metadata=meta,
                    )
                )
        return report
