"""The inference-engine seam (SkyRL's ``InferenceEngineInterface``, in small): rollouts, evaluation and the trainer
generate and push weights through one typed object whose capabilities are found once, when it is built."""

from evolvekit.engine.base import Capabilities, Engine, Sessions
from evolvekit.engine.sessions import LockStepSessions

__all__ = ["Capabilities", "Engine", "LockStepSessions", "Sessions"]
