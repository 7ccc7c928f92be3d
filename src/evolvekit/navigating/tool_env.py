"""Experience as an action (EvolveR §3.2.2): a ``search_experience`` tool next to the environment's own tools.

The wrapper adds the tool to the visible tool list; a call returns the top principles for its query from the
pool, and every other call goes to the wrapped environment. The tool's output reaches the policy as an
observation, i.e. prompt tokens with loss mask 0 — it is never trained on. Uses are counted on the experiences
returned (``experience_ids_used``) so the EvolveR score sees them.
"""

from __future__ import annotations

from evolvekit.env.base import Action, CallResult, Environment, ResetResult, StateKeyed, StepResult, ToolSchema
from evolvekit.navigating.pool import ExperiencePool
from evolvekit.train.rewards import SEARCH_TOOL
from evolvekit.types import Experience

TOOL_NAME = SEARCH_TOOL
TOOL = ToolSchema(
    name=TOOL_NAME,
    description="Search past experience for principles that help with a situation.",
    parameters={
        "type": "dict",
        "properties": {"query": {"type": "string", "description": "the situation or sub-goal to get advice for"}},
        "required": ["query"],
    },
)


# EvolveR's principle types: a guiding principle comes from a success, a cautionary one from a failure (§3.2.2)
PRINCIPLE_TYPE = {"failure": "cautionary"}


def principle_line(index: int, e: Experience) -> str:
    """One retrieved principle as EvolveR's search shows it (Appendix, 'Env: <experience>[Principle 0], type: guiding,
    metric score: 0.67, description: ...'): its index, its type (cautionary if distilled from a failure, else
    guiding), its metric score s(p) (Eq. 2) and its text."""
    kind = PRINCIPLE_TYPE.get(e.provenance.kind, "guiding")
    text = f"When to use: {e.when_to_use} | {e.content}"
    return f"[Principle {index}], type: {kind}, metric score: {e.score:.2f}, description: {text}"


def search_answer(pool: ExperiencePool, query: str, k: int) -> tuple[str, list[str]]:
    """The search tool's answer to ``query`` (the top-k principles, one line each, as ``principle_line``) and the
    experience ids in it."""
    hits = pool.retrieve(query, k)
    if not hits:
        return "No stored experience matches.", []
    return "\n".join(principle_line(i, e) for i, (e, _) in enumerate(hits)), [e.experience_id for e, _ in hits]


class ExperienceToolEnv:
    def __init__(self, env: Environment, pool: ExperiencePool, k: int = 3) -> None:
        self.env, self.pool, self.k = env, pool, k
        self.name = getattr(env, "name", "env")
        self.experience_ids_used: list[str] = []
        self._state_key = env.state_key if isinstance(env, StateKeyed) else None  # found once

    def state_key(self) -> str:
        """The wrapped environment's backend state (GiGPO's anchor, ``agent/rollout.py: anchor_key``); "" where it
        names none, which the anchor reads as no backend state. A search changes no backend state."""
        return self._state_key() if self._state_key is not None else ""

    def profile(self):
        return self.env.profile()

    def reset(self, task=None, sandbox_config=None) -> ResetResult:
        self.experience_ids_used = []
        res = self.env.reset(task, sandbox_config)
        return res.model_copy(update={"tools": [*res.tools, TOOL]})

    def _search(self, query: str) -> CallResult:
        text, ids = search_answer(self.pool, query, self.k)
        self.experience_ids_used += ids
        return CallResult(name=TOOL_NAME, ok=True, output=text)

    def step(self, action: Action) -> StepResult:
        mine = [c for c in action.tool_calls if c.name == TOOL_NAME]
        if not mine:
            res = self.env.step(action)
            if res.tools is not None:
                res = res.model_copy(update={"tools": [*res.tools, TOOL]})
            return res
        results = [self._search(str(c.arguments.get("query", ""))) for c in mine]
        others = [c for c in action.tool_calls if c.name != TOOL_NAME]
        obs = [f"[{r.name}] {r.output}" for r in results]
        if not others:  # only searches: the environment does not move
            return StepResult(observation="\n".join(obs), call_results=results)
        inner = self.env.step(action.model_copy(update={"tool_calls": others}))
        obs.append(inner.observation)
        # the environment's step in every other respect (reward, end of turn or episode, new tools, grounding)
        tools = None if inner.tools is None else [*inner.tools, TOOL]
        update = {"observation": "\n".join(obs), "call_results": results + inner.call_results, "tools": tools}
        return inner.model_copy(update=update)

    def evaluate(self, trajectory=None):
        return self.env.evaluate(trajectory)

    def info(self):
        return self.env.info()

    def close(self) -> None:
        self.env.close()
