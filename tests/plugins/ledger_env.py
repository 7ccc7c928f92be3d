"""A test-only environment plugin (env.plugins: [ledger_env]) for the information-boundary leak test.

One tool, ``add(a, b)``. Every person-written task's reference solution carries SENTINEL values that appear nowhere
in the task's request, so a sentinel found on the training side can only have come from the gold. The environment's
own outcome check reads the reference (allowed: it is the reward); its steps report grounding distances to the
reference's end state, as BFCL does. A random tiny policy never makes a valid call, so every group fails: the case
in which reference-written experiences and reference-derived credit used to leak.
"""

from __future__ import annotations

from evolvekit.config import EnvConfig
from evolvekit.env.action_text import format_call
from evolvekit.env.base import Action, CallResult, EnvInfo, EvalResult, ResetResult, StepResult, ToolSchema
from evolvekit.env.registry import register_env, register_task_source
from evolvekit.types import ChatMessage, StepGrounding, Task, ToolCall, Trajectory

SENTINEL_A = 73914.0625  # the gold values: never in a request, never typed by a random model
SENTINEL_B = 51823.125
# any trace of them: 7391x.0625 (a + i) or 51823 (b), as text in any number form
SENTINEL_PATTERN = r"739\d\d\.0625|739\d\d\.06|51823"

# a person-written worked example (a task instance of its own): its values are sentinels too, so any trace of it on
# the training side shows it was shown (env.worked_examples: person) or leaked; EXAMPLE_PATTERN is its own (a + 50:
# no reference's a + i)
EXAMPLE_PATTERN = r"73964\.06"
PERSON_EXAMPLES = [
    ChatMessage(role="user", content="Add the numbers of the example ledger line."),
    ChatMessage(
        role="assistant",
        content=format_call(ToolCall(name="add", arguments={"a": SENTINEL_A + 50, "b": SENTINEL_B})),
    ),
    ChatMessage(role="user", content=f"Tool results:\n[add] {SENTINEL_A + 50 + SENTINEL_B}"),
    ChatMessage(role="assistant", content="Done."),
]

ADD = ToolSchema(
    name="add",
    description="Add two numbers.",
    parameters={"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
)


class LedgerEnv:
    name = "ledger"

    def __init__(self) -> None:
        self.task: Task | None = None
        self.calls: list[ToolCall] = []
        self.done = False

    def profile(self):
        return []

    def reset(self, task=None, sandbox_config=None) -> ResetResult:
        self.task, self.calls, self.done = task, [], False
        return ResetResult(observation=task.turns[0] if task else "sandbox", tools=[ADD], examples=PERSON_EXAMPLES)

    def _reference(self) -> list[ToolCall]:
        return [c for turn in (self.task.reference_solution or []) for c in turn] if self.task else []

    def _distance(self) -> int:
        done = {(c.name, tuple(sorted(c.arguments.items()))) for c in self.calls}
        return sum((c.name, tuple(sorted(c.arguments.items()))) not in done for c in self._reference())

    def step(self, action: Action) -> StepResult:
        before = self._distance()
        if not action.tool_calls:  # an answer (or no parsable call): the episode ends where the state is
            self.done = True
            return StepResult(
                observation="", done=True, grounding=StepGrounding(distance_before=before, distance_after=before)
            )
        results = []
        for call in action.tool_calls:
            try:
                out = str(float(call.arguments["a"]) + float(call.arguments["b"])) if call.name == "add" else None
            except (KeyError, TypeError, ValueError):
                out = None
            results.append(CallResult(name=call.name, ok=out is not None, output=out or "error"))
            if out is not None:
                self.calls.append(call)
        g = StepGrounding(state_changed=bool(results), distance_before=before, distance_after=self._distance())
        return StepResult(
            observation="\n".join(r.output for r in results), call_results=results, grounding=g, done=False
        )

    def evaluate(self, trajectory: Trajectory | None = None) -> EvalResult:
        passed = bool(self._reference()) and self._distance() == 0
        return EvalResult(score=float(passed), passed=passed)

    def info(self) -> EnvInfo:
        return EnvInfo(env_name="ledger", instance_id="ledger", task_id=self.task.task_id if self.task else None)

    def close(self) -> None:
        pass


def person_tasks(split: str, n: int = 6) -> list[Task]:
    """Person-written tasks (TaskSource.REAL, the default) whose references hold the sentinels."""
    return [
        Task(
            task_id=f"ledger-{split}-{i}",
            env_name="ledger",
            query=f"Add the two numbers of ledger line {i} ({split}).",
            reference_solution=[[ToolCall(name="add", arguments={"a": SENTINEL_A + i, "b": SENTINEL_B})]],
        )
        for i in range(n)
    ]


@register_env("ledger", "test double: one add tool, person-written references holding sentinel values")
def _make(cfg: EnvConfig) -> LedgerEnv:
    return LedgerEnv()


@register_task_source("ledger")
def _tasks(cfg: EnvConfig, split: str) -> list[Task]:
    return person_tasks(split)
