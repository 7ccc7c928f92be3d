"""Experience extraction and validation (AgentEvolver §4.1 Ω_process), and the retrieval refine step (Eq. 14).

Ω_process: (1) split trajectories into successes and failures by score; (2) extract experiences from a success,
a failure, or a comparative (success, failure) pair of the same task — one summariser-LLM call each; (3) validate
each with an LLM yes/no check; (4) the caller embeds and stores them. Every answer is parsed leniently; an
unusable answer yields no experience (counted), never an exception.

For a small in-process summarizer (``navigating.extraction``): *constrained* extraction forces the reply into
``When to use: <line>`` / ``Content: <line>`` and lets the model write only the two lines, and validation becomes a
forced yes/no choice (llm/choice.py); *grounded* extraction writes a (success, failure) pair's experience from
execution (``grounded_experience``). Every candidate passes the same validation.
"""

from __future__ import annotations

import json
import logging
import random
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

from evolvekit.agent.calls import call_key
from evolvekit.boundary import InformationBoundary
from evolvekit.engine.base import Engine
from evolvekit.llm.base import LLM, Completion, SamplingParams
from evolvekit.llm.choice import ChoiceScorer, calibrated
from evolvekit.progress import StageProgress
from evolvekit.types import (
    MAX_EXPERIENCE_CHARS,
    ChatMessage,
    Experience,
    ExperienceProvenance,
    Task,
    ToolCall,
    Trajectory,
)

_log = logging.getLogger(__name__)

JobKind = Literal["success", "failure", "comparison"]

EXTRACT_SYSTEM = """You distill reusable experience from an agent's trajectories.
An experience has two parts:
- When to use: the situation in which it applies (this is what future tasks are matched against).
- Content: concrete instructions, precautions or strategies for acting well in that situation.
Write general lessons that transfer to similar tasks, not the answer to this one task."""

EXTRACT_FORMAT = """Reply with one to three experiences, each exactly as:
When to use: <one sentence>
Content: <one to three sentences>"""

VALIDATE_SYSTEM = "You check whether an experience is correct, general and actionable for an AI agent using tools."

RERANK_SYSTEM = "You rank experiences by how useful they are for a task."
REWRITE_SYSTEM = "You adapt a general experience to a specific task without adding facts."


def render_trajectory(traj: Trajectory, max_chars: int = 600) -> str:
    lines = []
    for s in traj.steps:
        lines.append(f"Action: {s.action_text[:max_chars]}")
        if s.observation:
            lines.append(f"Result: {s.observation[:max_chars]}")
    lines.append(f"Score: {traj.outcome_reward or 0.0:g}")
    return "\n".join(lines)


def extraction_prompt(kind: str, task: Task | None, trajs: Sequence[Trajectory]) -> list[ChatMessage]:
    query = "\n".join(task.turns) if task else "(unknown task)"
    if kind == "comparison":
        body = (
            f"Task:\n{query}\n\nA SUCCESSFUL attempt:\n{render_trajectory(trajs[0])}\n\n"
            f"A FAILED attempt:\n{render_trajectory(trajs[1])}\n\nWhat made the difference?"
        )
    else:
        label = "SUCCESSFUL" if kind == "success" else "FAILED"
        body = f"Task:\n{query}\n\nA {label} attempt:\n{render_trajectory(trajs[0])}"
    return [
        ChatMessage(role="system", content=EXTRACT_SYSTEM),
        ChatMessage(role="user", content=f"{body}\n\n{EXTRACT_FORMAT}"),
    ]


_PAIR = re.compile(
    r"when\s*to\s*use\s*[:：]\s*(.+?)\s*(?:\n|\s)\s*content\s*[:：]\s*(.+?)(?=\n\s*(?:\d+[.)]\s*)?\**\s*when\s*to\s*use|\Z)",
    re.IGNORECASE | re.DOTALL,
)


# the extraction prompts' own words: a reply that gives them back is an echo, not an experience (issue 54: "when to
# use: <one to three sentences>" entered a pool). Placeholders of the prompts' formats, e.g. <one sentence>, <the
# situation>; grounded experiences' own markers (<from the request>, <result of add>) are not among them.
_PROMPT_WORDS = " ".join(" ".join((EXTRACT_SYSTEM, EXTRACT_FORMAT, VALIDATE_SYSTEM)).lower().split())
_PLACEHOLDER = re.compile(r"<\s*(?:one|two|three|the|a|an|concrete|some)\b[^<>\n]{0,80}>", re.IGNORECASE)


def is_echo(text: str) -> bool:
    """A field that holds a prompt placeholder, or repeats a sentence of the extraction prompt (12 or more
    characters), rather than saying something of its own."""
    if _PLACEHOLDER.search(text):
        return True
    norm = " ".join(text.lower().split()).strip(" .:-")
    return len(norm) >= 12 and norm in _PROMPT_WORDS


def parse_experiences(text: str, max_items: int = 3) -> list[tuple[str, str]]:
    """(when_to_use, content) pairs from free-form text, or a JSON list of objects with those keys; pairs with a
    field out of bounds or echoing the prompt (``is_echo``) are dropped."""
    text = (text or "").strip()
    out: list[tuple[str, str]] = []
    try:
        data = json.loads(text)
        if isinstance(data, dict):
            data = [data]
        if isinstance(data, list):
            for d in data:
                if isinstance(d, dict) and isinstance(d.get("when_to_use"), str) and isinstance(d.get("content"), str):
                    out.append((d["when_to_use"].strip(), d["content"].strip()))
    except (json.JSONDecodeError, ValueError):
        for m in _PAIR.finditer(re.sub(r"[*_#`]", "", text)):  # markdown emphasis around the labels
            out.append((m.group(1).strip(" *\n"), m.group(2).strip(" *\n")))
    good = [(w, c) for w, c in out if 8 <= len(w) <= 400 and 8 <= len(c) <= 1200 and not is_echo(w) and not is_echo(c)]
    return good[:max_items]


def parse_yes_no(text: str) -> bool | None:
    m = re.search(r"\b(yes|no)\b", text or "", re.IGNORECASE)
    return None if m is None else m.group(1).lower() == "yes"


def _ok_calls(traj: Trajectory) -> list[ToolCall]:
    return [c for c, _ in _ok_calls_with_results(traj)]


def _describe_value(value: Any, query: str, earlier: list[tuple[str, str]]) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    if text and text in query:
        return "<from the request>"
    for name, obs in reversed(earlier):
        if text and text in obs:
            return f"<result of {name}>"
    return json.dumps(value)[:60]


def _describe(calls: Sequence[ToolCall], query: str, observations: dict[int, str]) -> str:
    parts: list[str] = []
    earlier: list[tuple[str, str]] = []
    for i, c in enumerate(calls):
        args = ", ".join(f"{k}={_describe_value(v, query, earlier)}" for k, v in c.arguments.items())
        parts.append(f"{c.name}({args})")
        earlier.append((c.name, observations.get(i, "")))
    return ", then ".join(parts)


def _failure_note(failure: Trajectory, success_keys: set) -> str:
    for step in failure.steps:
        if step.parse_error is not None and not step.tool_calls:
            return "writing a message that contains no valid tool call"
        for i, c in enumerate(step.tool_calls):
            if i < len(step.calls) and not step.calls[i].ok:
                err = step.observation.strip().splitlines()[0][:160] if step.observation.strip() else "an error"
                return f"calling {c.name} in a way that fails ({err})"
    extra = [c.name for c in _ok_calls(failure) if call_key(c) not in success_keys]
    if extra:
        return f"calling {', '.join(dict.fromkeys(extra))} with other arguments or where it is not needed"
    if not _ok_calls(failure):
        return "answering without calling any tool"
    return "stopping before every needed call was made"


def _ok_calls_with_results(traj: Trajectory) -> list[tuple[ToolCall, str]]:
    """The calls that ran without error, each with its step's observation."""
    out = []
    for step in traj.steps:
        for i, c in enumerate(step.tool_calls):
            if i >= len(step.calls) or step.calls[i].ok:
                out.append((c, step.observation))
    return out


def grounded_experience(
    task: Task | None, success: Trajectory, failure: Trajectory | None = None
) -> tuple[str, str] | None:
    """(when_to_use, content) written from execution: the calls a successful attempt made (argument values
    described by where they came from: the request, or an earlier call's result) and, given a failed attempt of
    the same task, the calls the failure lacked and its first mistake. None when the success made no call."""
    query = " ".join(task.turns) if task else ""
    pairs = _ok_calls_with_results(success)
    if not pairs:
        return None
    calls = [c for c, _ in pairs]
    observations = {i: obs for i, (_, obs) in enumerate(pairs)}
    key_of = [call_key(c) for c in calls]
    tools = ", ".join(dict.fromkeys(c.name for c in calls))
    head = query.strip().splitlines()[0][:200] if query.strip() else "a task"
    when = f'A request like "{head}" that the tools {tools} can answer.'
    content = f"Call {_describe(calls, query, observations)}, one call per message; then answer with the result."
    if failure is not None:
        fail_keys = {call_key(c) for c in _ok_calls(failure)}
        missing = [c for c, key in zip(calls, key_of) if key not in fail_keys]
        content += (
            f" The successful attempt made {len(missing) or 'the same'} call(s) the failed one did not"
            f"{': ' + ', '.join(c.name for c in missing) if missing else ''}."
            f" Avoid {_failure_note(failure, set(key_of))}."
        )
    return when, content[:1200]


def reference_experience(task: Task, failure: Trajectory) -> tuple[str, str] | None:
    """(when_to_use, content) for a task with only failed attempts, written from the task's reference solution (the
    calls that solve it, values described by their source) and the failure's first mistake. None without a
    reference."""
    calls = [c for turn in task.reference_solution or [] for c in turn]
    if not calls:
        return None
    query = " ".join(task.turns)
    tools = ", ".join(dict.fromkeys(c.name for c in calls))
    head = query.strip().splitlines()[0][:200] if query.strip() else "a task"
    when = f'A request like "{head}" that the tools {tools} can answer.'
    content = (
        f"Call {_describe(calls, query, {})}, one call per message; then answer with the result."
        f" Avoid {_failure_note(failure, {call_key(c) for c in calls})}."
    )
    return when, content[:1200]


def grounded_valid(when: str, content: str, trajectories: Sequence[Trajectory], task: Task | None = None) -> bool:
    """Validation grounded in the job's own execution (``navigating.extraction: grounded``): the experience names a
    tool its trajectories called (it is about this environment and actionable) and its content is not degenerate
    (at least half of its words distinct). Chosen over the LLM yes/no check at the embedded scale, where the 135M
    validator rejected sound experiences and accepted garbage (docs/training.md,
    benchmarks/results/helper_health.md)."""
    tools = {c.name for t in trajectories for s in t.steps for c in s.tool_calls}
    if task is not None:  # a reference-written experience names the reference's tools
        tools |= {c.name for turn in task.reference_solution or [] for c in turn}
    text = f"{when} {content}"
    if not any(re.search(rf"(?<![\w.]){re.escape(n)}(?![\w])", text) for n in tools):
        return False
    words = re.findall(r"\w+", content.lower())
    return bool(words) and len(set(words)) / len(words) >= 0.5


@dataclass
class ExtractionReport:
    experiences: list[Experience] = field(default_factory=list)
    calls: int = 0
    unparseable: int = 0
    rejected: int = 0
    jobs: int = 0  # extraction jobs (one per task: a success, a failure or a comparison)
    validated_jobs: int = 0  # jobs that yielded at least one validated experience
    grounded: int = 0  # experiences written from execution (no LLM call)
    closed_failures: int = 0  # grounded failure-only jobs skipped: no success and no reference the run may read
    prompt_tokens: int = 0  # the summarizer's, writing and validating (a forced choice: its prompt only)
    completion_tokens: int = 0

    @property
    def validated_share(self) -> float:
        return self.validated_jobs / self.jobs if self.jobs else 0.0


class ExperienceExtractor:
    """Ω_process. ``constrained``: the summarizer writes under a forced structure and validates by a calibrated
    forced yes/no (in-process model); ``grounded``: jobs are split by the environment's check, comparison and
    success-only jobs are written from execution without the summarizer, failure-only jobs from the task's reference
    where the boundary lets the run read it (a synthesized task's; a person-written one's only under ``run.oracle``)
    and skipped otherwise, and every candidate is validated against its job's execution (``grounded_valid``).
    ``boundary``: what the extractor may read of a task (closed by default)."""

    def __init__(
        self,
        engine: Engine,
        params: SamplingParams,
        validate: bool = True,
        success_threshold: float = 0.5,
        batch: int = 8,
        constrained: bool = False,
        grounded: bool = False,
        field_tokens: int = 64,
        boundary: InformationBoundary | None = None,
    ) -> None:
        self.engine, self.params, self.validate = engine, params, validate
        # what the extractor may read of a task: a person-written task's reference only under run.oracle
        self.boundary = boundary if boundary is not None else InformationBoundary()
        self.prompt_tokens = self.completion_tokens = 0  # the summarizer's, over the extractor's life
        self.success_threshold, self.batch = success_threshold, batch
        self.constrained, self.grounded, self.field_tokens = constrained, grounded, field_tokens
        self.scorer = ChoiceScorer(engine.llm) if constrained else None
        self.rng = random.Random(params.seed or 0)

    def _score(self, traj: Trajectory) -> float:
        """Success for the split: the rollout's reward (the paper), or in grounded mode the environment's own check
        (a judge's score on a synthetic task is not execution)."""
        return traj.checked_outcome if self.grounded else traj.unshaped_outcome

    def jobs(self, trajectories: Sequence[Trajectory]) -> list[tuple[JobKind, list[Trajectory]]]:
        """(1) preprocessing: valid trajectories split by score; one success, one failure and one comparison per
        task."""
        by_task: dict[str, list[Trajectory]] = {}
        for t in trajectories:
            if not t.flags.failed and t.steps:
                by_task.setdefault(t.task_id, []).append(t)
        jobs: list[tuple[JobKind, list[Trajectory]]] = []
        for trajs in by_task.values():
            wins = [t for t in trajs if self._score(t) >= self.success_threshold]
            losses = [t for t in trajs if self._score(t) < self.success_threshold]
            if wins and losses:
                jobs.append(("comparison", [wins[0], losses[0]]))
            elif wins:
                jobs.append(("success", [wins[0]]))
            elif losses:
                jobs.append(("failure", [losses[0]]))
        return jobs

    def _write(
        self, chunk: Sequence[tuple[JobKind, list[Trajectory]]], tasks: dict[str, Task]
    ) -> list[list[tuple[str, str]]]:
        """(2) one summarizer answer per job, parsed into (when_to_use, content) pairs."""
        convs = [extraction_prompt(k, tasks.get(ts[0].task_id), ts) for k, ts in chunk]
        if not self.constrained:
            outs = self.engine.chat(convs, self.params)
            self._count([out[0] for out in outs])
            return [parse_experiences(out[0].text) for out in outs]
        # forced structure: the reply is "When to use: <line>\nContent: <line>"; the model writes the two lines
        line = SamplingParams(
            temperature=self.params.temperature,
            top_p=self.params.top_p,
            max_new_tokens=self.field_tokens,
            stop=("\n",),
            seed=self.params.seed,
        )
        bases = [self.engine.apply_chat_template(c) for c in convs]
        firsts = [b + self.engine.encode("When to use:") for b in bases]
        outs = self.engine.generate_ids(firsts, line)
        self._count([o[0] for o in outs], firsts)
        whens = [o[0].text.split("\n")[0].strip() for o in outs]
        seconds = [b + self.engine.encode(f"When to use: {w}\nContent:") for b, w in zip(bases, whens)]
        outs = self.engine.generate_ids(seconds, line)
        self._count([o[0] for o in outs], seconds)
        contents = [o[0].text.split("\n")[0].strip() for o in outs]
        return [parse_experiences(f"When to use: {w}\nContent: {c}", 1) for w, c in zip(whens, contents)]

    def _approve(self, chunk: Sequence[Experience]) -> list[bool]:
        """(3) the yes/no validation (forced choice between " yes" and " no" when constrained)."""
        convs = [
            [
                ChatMessage(role="system", content=VALIDATE_SYSTEM),
                ChatMessage(
                    role="user",
                    content=f"When to use: {e.when_to_use}\nContent: {e.content}\n\n"
                    "Is this experience correct, general and actionable? Answer yes or no.",
                ),
            ]
            for e in chunk
        ]
        if self.scorer is None:
            outs = self.engine.chat(convs, self.params)
            self._count([out[0] for out in outs])
            return [bool(parse_yes_no(out[0].text)) for out in outs]
        self.prompt_tokens += sum(len(self.engine.apply_chat_template(c)) for c in convs)  # scored, not generated
        return [forced_yes(self.scorer, self.engine.llm, c, self.params.temperature, self.rng) for c in convs]

    def _count(self, outs: Sequence[Completion], prompts: Sequence[Sequence[int]] | None = None) -> None:
        """Add the summarizer's token counts (issue 54: the judge and summarizer reported none)."""
        for k, out in enumerate(outs):
            self.prompt_tokens += out.num_prompt_tokens or (len(prompts[k]) if prompts is not None else 0)
            self.completion_tokens += out.num_completion_tokens

    def extract(
        self, trajectories: Sequence[Trajectory], tasks: dict[str, Task], iteration: int | None = None
    ) -> ExtractionReport:
        report = ExtractionReport()
        tokens_before = (self.prompt_tokens, self.completion_tokens)
        tasks = self.boundary.tasks_view(tasks)  # person-written references stay closed unless run.oracle
        jobs = self.jobs(trajectories)
        report.jobs = len(jobs)
        candidates: list[tuple[int, Experience]] = []  # (job index, experience)

        def add(j: int, kind: JobKind, ts: list[Trajectory], pairs: list[tuple[str, str]]) -> None:
            if not pairs:
                report.unparseable += 1
            for w, c in pairs:
                candidates.append(
                    (
                        j,
                        Experience(
                            when_to_use=w[:MAX_EXPERIENCE_CHARS],  # a model's text may run long: cut, not refused
                            content=c[:MAX_EXPERIENCE_CHARS],
                            provenance=ExperienceProvenance(
                                kind=kind,
                                trajectory_ids=[t.trajectory_id for t in ts],
                                task_ids=[ts[0].task_id],
                                iteration=iteration,
                            ),
                        ),
                    )
                )

        llm_jobs = []
        for j, (kind, ts) in enumerate(jobs):
            task = tasks.get(ts[0].task_id)
            from_reference = kind == "failure" and task is not None and bool(task.reference_solution)
            if self.grounded and kind == "failure" and not from_reference:
                # only failed episodes and no reference the run may read (a person-written task's gold is closed):
                # nothing executed well to write from, so no experience (and no 135M summarizer guess)
                report.closed_failures += 1
                continue
            if self.grounded:  # written from execution, no model call
                pair = (
                    reference_experience(task, ts[0])
                    if from_reference and task is not None
                    else grounded_experience(task, ts[0], ts[1] if len(ts) > 1 else None)
                )
                pairs = parse_experiences(f"When to use: {pair[0]}\nContent: {pair[1]}", 1) if pair else []
                report.grounded += len(pairs)
                add(j, kind, ts, pairs)
            else:
                llm_jobs.append(j)
        with StageProgress("experience writing", len(llm_jobs), logger=_log) as progress:
            for lo in range(0, len(llm_jobs), self.batch):
                chunk = llm_jobs[lo : lo + self.batch]
                written = self._write([jobs[j] for j in chunk], tasks)
                report.calls += len(chunk)
                for j, pairs in zip(chunk, written):
                    add(j, jobs[j][0], jobs[j][1], pairs)
                progress.advance(len(chunk))
        approved_jobs: set[int] = set()
        for lo in range(0, len(candidates), self.batch):
            batch = candidates[lo : lo + self.batch]
            if not self.validate:
                ok = [True] * len(batch)
            elif self.grounded:
                ok = [
                    grounded_valid(e.when_to_use, e.content, jobs[j][1], tasks.get(jobs[j][1][0].task_id))
                    for j, e in batch
                ]
            else:
                ok = self._approve([e for _, e in batch])
                report.calls += len(batch)
            for (j, e), good in zip(batch, ok):
                if good:
                    report.experiences.append(e)
                    approved_jobs.add(j)
                else:
                    report.rejected += 1
        report.validated_jobs = len(approved_jobs)
        report.prompt_tokens = self.prompt_tokens - tokens_before[0]
        report.completion_tokens = self.completion_tokens - tokens_before[1]
        return report


def llm_equivalence(llm: LLM, params: SamplingParams, constrained: bool = False):
    """EvolveR's merge check: does the new experience say the same as the existing one? ``constrained``: a forced
    ``Answer: yes|no`` choice by log-probability (in-process model; never unparseable)."""
    scorer = ChoiceScorer(llm) if constrained else None
    rng = random.Random(params.seed or 0)

    def check(new: Experience, old: Experience) -> bool:
        conv = [
            ChatMessage(role="system", content="You compare two pieces of advice for an AI agent."),
            ChatMessage(
                role="user",
                content=f"A) When to use: {old.when_to_use}\nContent: {old.content}\n\n"
                f"B) When to use: {new.when_to_use}\nContent: {new.content}\n\n"
                "Do A and B give the same advice? Answer yes or no.",
            ),
        ]
        if scorer is not None:
            return forced_yes(scorer, llm, conv, params.temperature, rng)
        return bool(parse_yes_no(llm.chat([conv], params)[0][0].text))

    return check


def forced_yes(
    scorer: ChoiceScorer,
    llm: Any,
    conv: list[ChatMessage],
    temperature: float,
    rng: random.Random,
    calibrate: bool = True,
) -> bool:
    """The reply forced to ``Answer:``, then " yes" or " no" by log-probability, calibrated against the same
    question about content-free text (every "When to use"/"Content"/"A)"/"B)" value replaced by N/A)."""
    options = [llm.encode(" yes"), llm.encode(" no")]
    lead = llm.encode("Answer:")
    prior = None
    if calibrate:
        blank = [
            m.model_copy(update={"content": re.sub(r"(:)\s*[^\n]*", r"\1 N/A", m.content)}) if m.role == "user" else m
            for m in conv
        ]
        prior = calibrated(scorer, llm.apply_chat_template(blank) + lead, options)
    return scorer.pick(llm.apply_chat_template(conv) + lead, options, temperature, rng, prior)[0] == 0


def refine(
    llm: LLM | None,
    params: SamplingParams,
    query: str,
    retrieved: Sequence[Experience],
    rerank: bool,
    rewrite: bool,
    keep: int = 1,
) -> list[tuple[Experience, str]]:
    """Ω_refine (Eq. 14): optional LLM re-ranking, then optional re-writing for the task.

    Returns the ``keep`` experiences that go into the prompt, in their final order, each with the text injected
    for it — so the caller credits (EvolveR's use/success counts) exactly the experiences the policy saw."""
    items = list(retrieved)
    if llm is not None and rerank and len(items) > 1:
        listing = "\n".join(f"[{i}] When to use: {e.when_to_use} | Content: {e.content}" for i, e in enumerate(items))
        conv = [
            ChatMessage(role="system", content=RERANK_SYSTEM),
            ChatMessage(role="user", content=f"Task: {query}\n\n{listing}\n\nList the numbers, most useful first."),
        ]
        order = [int(x) for x in re.findall(r"\d+", llm.chat([conv], params)[0][0].text)]
        seen: list[int] = []
        for i in order:
            if 0 <= i < len(items) and i not in seen:
                seen.append(i)
        seen += [i for i in range(len(items)) if i not in seen]  # unranked ones keep their retrieval order
        items = [items[i] for i in seen]
    items = items[:keep]
    texts = [f"When to use: {e.when_to_use}\nContent: {e.content}" for e in items]
    if llm is not None and rewrite and texts:
        convs = [
            [
                ChatMessage(role="system", content=REWRITE_SYSTEM),
                ChatMessage(
                    role="user",
                    content=f"Task: {query}\n\nExperience:\n{t}\n\nRewrite the experience "
                    "so it directly helps with this task. Keep it short.",
                ),
            ]
            for t in texts
        ]
        outs = llm.chat(convs, params)
        texts = [o[0].text.strip() or t for o, t in zip(outs, texts)]
    return list(zip(items, texts))
