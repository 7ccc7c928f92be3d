"""Test doubles for episodes without a model (agent/rollout.py, agent/evaluate.py): a tiny tool environment and a
chat-only scripted policy, and an engine double for the policy's publish. Only tests import this module."""

from types import SimpleNamespace

from evolvekit.env.base import CallResult, EvalResult, ResetResult, StepResult, ToolSchema
from evolvekit.llm.base import Completion
from evolvekit.types import Task, ToolCall

TOOLS = [
    ToolSchema(name="add", description="Add a and b.", parameters={"type": "object", "properties": {}}),
    ToolSchema(name="mul", description="Multiply a and b.", parameters={"type": "object", "properties": {}}),
]


def tiny_task(tid: str, tool: str) -> Task:
    return Task(task_id=tid, env_name="tiny", query=f"please {tool}", reference_solution=[[ToolCall(name=tool)]])


class TinyEnv:
    """One call ends the episode; text asks again; the check passes when the reference tool was called. A request
    containing "crash" raises in step (a failed episode)."""

    name = "tiny"

    def __init__(self) -> None:
        self.task: Task | None = None
        self.called: list[str] = []

    def reset(self, task=None, sandbox_config=None):
        self.task = task
        return ResetResult(observation=str(task.query), tools=TOOLS)

    def step(self, action):
        if "crash" in str(self.task.query):
            raise RuntimeError("backend died")
        names = [c.name for c in action.tool_calls]
        self.called += names
        results = [CallResult(name=n, ok=True, output="4") for n in names]
        return StepResult(observation="4" if names else "call a tool", done=bool(names), call_results=results)

    def evaluate(self, trajectory=None):
        want = self.task.reference_solution[0][0].name
        return EvalResult(score=1.0 if want in self.called else 0.0, passed=want in self.called)

    def close(self) -> None:
        pass


class ScriptedChat:
    """Chat-only: replies from a per-request script, one reply per call of that request (cycled)."""

    name = "scripted-chat"

    def __init__(self, script: dict[str, list[str]]) -> None:
        self.script, self.seen = script, {k: 0 for k in script}
        self.systems: list[str] = []
        self.params: list = []  # each call's sampling parameters
        self.batches: list[int] = []  # each call's number of conversations

    def chat(self, convs, params):
        self.params.append(params)
        self.batches.append(len(convs))
        out = []
        for conv in convs:
            self.systems.append(conv[0].content)
            request = next(m.content for m in conv if m.role == "user")
            replies = self.script[request]
            text = replies[self.seen[request] % len(replies)]
            self.seen[request] += 1
            out.append([Completion(text=text, usage_prompt_tokens=10, usage_completion_tokens=3)])
        return out


def logged(caplog, logger: str) -> list[str]:
    """What ``logger`` logged in a test (other loggers, such as a model's load line under xdist, are not its)."""
    return [r.getMessage() for r in caplog.records if r.name == logger]


class RecordingEngine:
    """An engine double for ``Policy.publish``: its capabilities, and the weights and cache resets it was sent."""

    def __init__(self, weight_updates: bool, in_process: bool) -> None:
        self.caps = SimpleNamespace(weight_updates=weight_updates, in_process=in_process)
        self.updates: list[dict] = []
        self.resets = 0

    def update_weights(self, state: dict) -> None:
        self.updates.append(state)

    def reset_prefix_cache(self) -> None:
        self.resets += 1
