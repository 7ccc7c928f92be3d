"""evolvekit: LLM agents that train themselves in environments nobody wrote tasks for."""

__version__ = "0.1.0"
