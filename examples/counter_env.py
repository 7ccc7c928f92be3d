"""A complete environment in about 40 lines (docs/environments.md, "Bring your own environment").

evolvekit eval --set env.name=counter --set "env.plugins=[examples.counter_env]" --subset test --limit 4 --k 2
"""

from evolvekit.env.base import Action, EnvInfo, ResetResult, StepResult, ToolSchema, execute_calls
from evolvekit.env.registry import register_env, register_task_source
from evolvekit.env.replay import ScoredByReplay
from evolvekit.types import Task, ToolCall

# parameters: a JSON schema object, {"type": "object", "properties": {...}} (the explorer decodes arguments under it)
ADD_N = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
TOOLS = [ToolSchema(name="add", description="Add n to the counter.", parameters=ADD_N)]


@register_env("counter", "a counter the agent must bring to a target")
class CounterEnv(ScoredByReplay):  # evaluate(): replay the task's reference on a fresh counter, compare end_state()
    name = "counter"

    def __init__(self, cfg=None):
        self.value, self.task = 0, None

    def profile(self):
        return []

    def reset(self, task=None, sandbox_config=None):
        self.value, self.task = 0, task
        return ResetResult(observation=task.query if task else "Explore the counter.", tools=TOOLS)

    def add(self, call):  # one tool call: its output, or an exception (a failed call, told to the agent)
        self.value += int(call.arguments["n"])
        return f"counter = {self.value}"

    def step(self, action: Action):  # tool calls act, each with its CallResult; a message without calls ends it
        observation, results = execute_calls(action.tool_calls, self.add, TOOLS)
        return StepResult(observation=observation, call_results=results, done=not action.tool_calls)

    def end_state(self):  # what the outcome check compares with where the reference solution ends
        return self.value

    def info(self):
        return EnvInfo(env_name=self.name, task_id=self.task.task_id if self.task else None)

    def close(self):
        pass


@register_task_source("counter")
def counter_tasks(cfg, split):
    offset = {"train": 0, "dev": 100, "test": 200}[split]  # splits never share a target
    return [
        Task(task_id=f"counter-{split}-{i}", env_name="counter", query=f"Bring the counter to {offset + i}.",
             metadata={"target": offset + i}, reference_solution=[[ToolCall(name="add", arguments={"n": offset + i})]])
        for i in range(20)
    ]  # fmt: skip
