"""What an engine backend declares when it registers (``engine/registry.py``): its name, the devices it runs on, the
settings it reads, whether it holds its own copy of the weights, its own config rules, and how it is built."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from pydantic import BaseModel

from evolvekit.config import PolicyModelConfig

if TYPE_CHECKING:
    from evolvekit.llm.base import RolloutEngine
    from evolvekit.llm.local import LocalLLM


@dataclass(frozen=True)
class EngineRequest:
    """What a backend is built from: the policy role's settings, the trained policy it samples for, the run's seed
    and its validated options (``models.policy.engine_options``, for a backend that declares an options model)."""

    settings: PolicyModelConfig
    policy: LocalLLM
    seed: int
    options: BaseModel | None = None


@dataclass(frozen=True)
class EngineBackend:
    """One rollout engine, registered under ``name`` (``models.policy.engine``).

    - ``devices``: the device kinds it runs on (``cpu``, ``cuda``, ``mps``), checked against an explicit
      ``models.policy.device``;
    - ``settings``: the ``models.policy`` fields only this engine reads (``config show`` hides them under another);
    - ``holds_weights``: it samples from its own copy of the policy's weights, pushed after every update (so the
      policy must be in process, and a LoRA adapter would have to be merged first: refused);
    - ``problem``: the engine's own rules over the policy role's settings, as one line, else None;
    - ``options``: a pydantic model of ``models.policy.engine_options`` (a plugin's own settings), or None when the
      engine takes none;
    - ``build``: the engine over the trained policy.
    """

    name: str
    summary: str
    build: Callable[[EngineRequest], RolloutEngine]
    devices: tuple[str, ...] = ("cpu", "cuda")
    settings: tuple[str, ...] = ()
    holds_weights: bool = False
    problem: Callable[[PolicyModelConfig], str | None] = field(default=lambda settings: None)
    options: type[BaseModel] | None = None
