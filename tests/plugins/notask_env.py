"""A test-only environment with no tasks of its own (env.plugins: [notask_env]): the coin environment, registered
without a task source, like an MCP server without env.mcp.tasks_file."""

from __future__ import annotations

from coin_env import CoinEnv

from evolvekit.config import EnvConfig
from evolvekit.env.registry import register_env


@register_env("coin_notask", "test double: the coin environment with no tasks of its own")
def _make(cfg: EnvConfig) -> CoinEnv:
    return CoinEnv()
