"""The sample stage of a run, built from config: plain GRPO samples, or self-attributing ones (§5)."""

from __future__ import annotations

from typing import Callable

import evolvekit.attributing.estimators  # noqa: F401 - registers dual_channel and gigpo
from evolvekit.attributing.attributor import StepAttributor
from evolvekit.attributing.stage import AttributedSamples
from evolvekit.boundary import InformationBoundary
from evolvekit.config import Config, attribution_source, attributor_constrained
from evolvekit.llm import factory  # its functions looked up when called (the wiring tests record them)
from evolvekit.train.sample_stage import GRPOSamples


def sample_stage(cfg: Config, scale: Callable | None = None):
    """Plain GRPO samples, or self-attributing ones (§5) when ``attributing.enabled``; under hybrid
    self-questioning (λ < 1) ``scale`` (questioning/supply.py: ``hybrid_advantage_scale``) down-weights proxy-task
    advantages in either (§3.3)."""
    if not cfg.attributing.enabled:
        return GRPOSamples.from_config(cfg, scale)

    attributor = None
    # grounded and gigpo credit need no helper model
    if cfg.attributing.mode != "outcome_only" and attribution_source(cfg) == "llm":
        llm = factory.role_llm(cfg.models, "attributor")
        attributor = StepAttributor(
            llm,
            factory.sampling_for(cfg.models.attributor),
            cfg.attributing.max_retries,
            cfg.attributing.concurrency,
            constrained=attributor_constrained(cfg),
        )
    return AttributedSamples.from_config(cfg, attributor, scale, InformationBoundary(cfg.run.oracle))
