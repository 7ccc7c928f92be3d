"""Seeding an experience pool: a task family's worked examples written as experiences (``when_to_use`` + ``content``).

The in-context lift of worked examples on a small policy is measured (FACTS.md: ~0-1% -> ~30% on the arith family);
as experiences they reach the policy the way self-navigating delivers experience — retrieved per task and
injected as a strippable span — so guided and vanilla rollouts can be compared on the same footing.
"""

from __future__ import annotations

import json

from evolvekit.env.action_text import format_call
from evolvekit.env.bfcl.families import TaskFamily
from evolvekit.types import Experience, ExperienceProvenance


def family_experiences(family: TaskFamily) -> list[Experience]:
    """One experience per demonstration of ``family`` (ids are stable, so re-seeding never duplicates)."""
    out = []
    for i, d in enumerate(family.demonstrations):
        if d.next_turns:  # a multi-turn example: one call per turn, later turns on earlier results
            turns = [d, *d.next_turns]
            content = " ".join(
                f"Turn {k + 1} ({t.request!r}): call {format_call(t.call)}, and after the tool answers ({t.result}) "
                f'reply "{t.final}".'
                for k, t in enumerate(turns)
            )
            content += " Use the numbers the tools returned in earlier turns."
        elif not d.then:
            args = ", ".join(f"{k}={json.dumps(v)}" for k, v in d.call.arguments.items())
            content = (
                f"Answer with exactly one tool call and nothing else: {format_call(d.call)} "
                f"(tool {d.call.name}, arguments {args}). After the tool answers ({d.result}), "
                f'reply in one sentence, e.g. "{d.final}"'
            )
        else:  # a multi-step example: one call per message, each after the previous call's answer
            chain = " Then, after the tool answers ".join(f"call {format_call(c)} ({r})" for c, r in d.steps)
            content = (
                f"Make one tool call per message, in order: {chain}. Only after the last answer, reply in one "
                f'sentence, e.g. "{d.final}"'
            )
        names = ", then ".join(c.name for t in (d, *d.next_turns) for c, _ in t.steps)
        out.append(
            Experience(
                experience_id=f"exp-{family.name}-example-{i}",
                when_to_use=f"A request that needs {names}, like: {d.request}",
                content=content,
                provenance=ExperienceProvenance(kind="imported", task_ids=[f"{family.name}-example-{i}"]),
            )
        )
    return out
