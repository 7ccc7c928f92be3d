"""A 4-tool bank plugin written from docs/environments.md ("Bring your own environment") alone, as a new user would
(issue 78.1): JSON-schema parameters, execute_calls for the CallResults, ScoredByReplay for synthesized tasks."""

from evolvekit.env.base import Action, EnvInfo, ResetResult, StepResult, ToolSchema, execute_calls
from evolvekit.env.registry import register_env
from evolvekit.env.replay import ScoredByReplay

ACCOUNT = {"type": "string", "enum": ["checking", "savings"]}
AMOUNT = {"type": "integer"}
TOOLS = [
    ToolSchema(
        name="deposit",
        description="Deposit an amount into an account.",
        parameters={
            "type": "object",
            "properties": {"account": ACCOUNT, "amount": AMOUNT},
            "required": ["account", "amount"],
        },
    ),
    ToolSchema(
        name="withdraw",
        description="Withdraw an amount from an account.",
        parameters={
            "type": "object",
            "properties": {"account": ACCOUNT, "amount": AMOUNT},
            "required": ["account", "amount"],
        },
    ),
    ToolSchema(
        name="transfer",
        description="Transfer an amount from one account to the other.",
        parameters={
            "type": "object",
            "properties": {"source": ACCOUNT, "target": ACCOUNT, "amount": AMOUNT},
            "required": ["source", "target", "amount"],
        },
    ),
    ToolSchema(
        name="get_balance",
        description="Get the balance of an account.",
        parameters={"type": "object", "properties": {"account": ACCOUNT}, "required": ["account"]},
    ),
]


@register_env("docs_bank", "two bank accounts")
class BankEnv(ScoredByReplay):
    name = "docs_bank"

    def __init__(self, cfg=None):
        self.accounts, self.task = {"checking": 100, "savings": 500}, None

    def profile(self):
        return []

    def reset(self, task=None, sandbox_config=None):
        self.accounts, self.task = {"checking": 100, "savings": 500}, task
        return ResetResult(observation=task.query if task else "Explore the bank.", tools=TOOLS)

    def _call(self, call):
        a = call.arguments
        if call.name == "get_balance":
            return f"{a['account']} balance: {self.accounts[a['account']]}"
        amount = int(a["amount"])
        if amount <= 0:
            raise ValueError("the amount must be positive")
        if call.name == "deposit":
            self.accounts[a["account"]] += amount
        elif call.name == "withdraw":
            if amount > self.accounts[a["account"]]:
                raise ValueError("insufficient funds")
            self.accounts[a["account"]] -= amount
        elif call.name == "transfer":
            if amount > self.accounts[a["source"]]:
                raise ValueError("insufficient funds")
            self.accounts[a["source"]] -= amount
            self.accounts[a["target"]] += amount
        return f"checking = {self.accounts['checking']}, savings = {self.accounts['savings']}"

    def step(self, action: Action):
        observation, results = execute_calls(action.tool_calls, self._call, TOOLS)
        return StepResult(observation=observation or "done", call_results=results, done=not action.tool_calls)

    def end_state(self):
        return dict(self.accounts)

    def info(self):
        return EnvInfo(env_name=self.name, task_id=self.task.task_id if self.task else None)

    def close(self):
        pass
