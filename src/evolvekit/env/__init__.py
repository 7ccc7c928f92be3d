"""Environments behind one Gym-like protocol (AgentEvolver §6.3), local or over HTTP."""

from evolvekit.env.base import Action, EnvInfo, Environment, EnvProfile, EvalResult, ResetResult, StepResult, ToolSchema
from evolvekit.env.registry import available_envs, make_env, register_env

__all__ = [
    "Action",
    "EnvInfo",
    "EnvProfile",
    "Environment",
    "EvalResult",
    "ResetResult",
    "StepResult",
    "ToolSchema",
    "available_envs",
    "make_env",
    "register_env",
]
