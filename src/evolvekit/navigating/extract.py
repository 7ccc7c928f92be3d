"""Experience extraction and validation (AgentEvolver §4.1 Ω_process), and the retrieval refine step (Eq. 14).

Ω_process: (1) split trajectories into successes and failures by score; (2) extract experiences from a success,
a failure, or a comparative (success, failure) pair of the same task — one summariser-LLM call each; (3) validate
each with an LLM yes/no check; (4) the caller embeds and stores them. Every answer is parsed leniently; an
unusable answer yields no experience (counted), never an exception.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Sequence

from evolvekit.llm.base import LLM, SamplingParams
from evolvekit.types import ChatMessage, Experience, ExperienceProvenance, Task, Trajectory

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
        body = (f"Task:\n{query}\n\nA SUCCESSFUL attempt:\n{render_trajectory(trajs[0])}\n\n"
                f"A FAILED attempt:\n{render_trajectory(trajs[1])}\n\nWhat made the difference?")
    else:
        label = "SUCCESSFUL" if kind == "success" else "FAILED"
        body = f"Task:\n{query}\n\nA {label} attempt:\n{render_trajectory(trajs[0])}"
    return [ChatMessage(role="system", content=EXTRACT_SYSTEM), ChatMessage(role="user", content=f"{body}\n\n{EXTRACT_FORMAT}")]


_PAIR = re.compile(r"when\s*to\s*use\s*[:：]\s*(.+?)\s*(?:\n|\s)\s*content\s*[:：]\s*(.+?)(?=\n\s*(?:\d+[.)]\s*)?\**\s*when\s*to\s*use|\Z)",
                   re.IGNORECASE | re.DOTALL)


def parse_experiences(text: str, max_items: int = 3) -> list[tuple[str, str]]:
    """(when_to_use, content) pairs from free-form text, or a JSON list of objects with those keys."""
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
    good = [(w, c) for w, c in out if 8 <= len(w) <= 400 and 8 <= len(c) <= 1200]
    return good[:max_items]


def parse_yes_no(text: str) -> bool | None:
    m = re.search(r"\b(yes|no)\b", text or "", re.IGNORECASE)
    return None if m is None else m.group(1).lower() == "yes"


@dataclass
class ExtractionReport:
    experiences: list[Experience] = field(default_factory=list)
    calls: int = 0
    unparseable: int = 0
    rejected: int = 0


class ExperienceExtractor:
    def __init__(self, llm: LLM, params: SamplingParams, validate: bool = True, success_threshold: float = 0.5,
                 batch: int = 8) -> None:
        self.llm, self.params, self.validate = llm, params, validate
        self.success_threshold, self.batch = success_threshold, batch

    def jobs(self, trajectories: Sequence[Trajectory]) -> list[tuple[str, list[Trajectory]]]:
        """(1) preprocessing: valid trajectories split by score; one success, one failure and one comparison per task."""
        by_task: dict[str, list[Trajectory]] = {}
        for t in trajectories:
            if not t.flags.failed and t.steps:
                by_task.setdefault(t.task_id, []).append(t)
        jobs = []
        for trajs in by_task.values():
            wins = [t for t in trajs if (t.outcome_reward or 0.0) >= self.success_threshold]
            losses = [t for t in trajs if (t.outcome_reward or 0.0) < self.success_threshold]
            if wins and losses:
                jobs.append(("comparison", [wins[0], losses[0]]))
            elif wins:
                jobs.append(("success", [wins[0]]))
            elif losses:
                jobs.append(("failure", [losses[0]]))
        return jobs

    def extract(self, trajectories: Sequence[Trajectory], tasks: dict[str, Task], iteration: int | None = None) -> ExtractionReport:
        report = ExtractionReport()
        jobs = self.jobs(trajectories)
        candidates: list[Experience] = []
        for lo in range(0, len(jobs), self.batch):
            chunk = jobs[lo: lo + self.batch]
            outs = self.llm.chat([extraction_prompt(k, tasks.get(ts[0].task_id), ts) for k, ts in chunk], self.params)
            report.calls += len(chunk)
            for (kind, ts), out in zip(chunk, outs):
                pairs = parse_experiences(out[0].text)
                if not pairs:
                    report.unparseable += 1
                for w, c in pairs:
                    candidates.append(Experience(when_to_use=w, content=c, provenance=ExperienceProvenance(
                        kind=kind, trajectory_ids=[t.trajectory_id for t in ts], task_ids=[ts[0].task_id],
                        iteration=iteration)))
        if not self.validate:
            report.experiences = candidates
            return report
        for lo in range(0, len(candidates), self.batch):
            chunk = candidates[lo: lo + self.batch]
            convs = [[ChatMessage(role="system", content=VALIDATE_SYSTEM),
                      ChatMessage(role="user", content=f"When to use: {e.when_to_use}\nContent: {e.content}\n\n"
                                  "Is this experience correct, general and actionable? Answer yes or no.")] for e in chunk]
            outs = self.llm.chat(convs, self.params)
            report.calls += len(chunk)
            for e, out in zip(chunk, outs):
                if parse_yes_no(out[0].text):
                    report.experiences.append(e)
                else:
                    report.rejected += 1
        return report


def llm_equivalence(llm: LLM, params: SamplingParams):
    """EvolveR's merge check: does the new experience say the same as the existing one?"""
    def check(new: Experience, old: Experience) -> bool:
        conv = [ChatMessage(role="system", content="You compare two pieces of advice for an AI agent."),
                ChatMessage(role="user", content=f"A) When to use: {old.when_to_use}\nContent: {old.content}\n\n"
                            f"B) When to use: {new.when_to_use}\nContent: {new.content}\n\n"
                            "Do A and B give the same advice? Answer yes or no.")]
        return bool(parse_yes_no(llm.chat([conv], params)[0][0].text))

    return check


def refine(llm: LLM | None, params: SamplingParams, query: str, retrieved: Sequence[Experience], rerank: bool,
           rewrite: bool, keep: int = 1) -> list[tuple[Experience, str]]:
    """Ω_refine (Eq. 14): optional LLM re-ranking, then optional re-writing for the task.

    Returns the ``keep`` experiences that go into the prompt, in their final order, each with the text injected
    for it — so the caller credits (EvolveR's use/success counts) exactly the experiences the policy saw."""
    items = list(retrieved)
    if llm is not None and rerank and len(items) > 1:
        listing = "\n".join(f"[{i}] When to use: {e.when_to_use} | Content: {e.content}" for i, e in enumerate(items))
        conv = [ChatMessage(role="system", content=RERANK_SYSTEM),
                ChatMessage(role="user", content=f"Task: {query}\n\n{listing}\n\nList the numbers, most useful first.")]
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
        convs = [[ChatMessage(role="system", content=REWRITE_SYSTEM),
                  ChatMessage(role="user", content=f"Task: {query}\n\nExperience:\n{t}\n\nRewrite the experience "
                              "so it directly helps with this task. Keep it short.")] for t in texts]
        outs = llm.chat(convs, params)
        texts = [o[0].text.strip() or t for o, t in zip(outs, texts)]
    return list(zip(items, texts))
